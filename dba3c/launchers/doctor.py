"""``dba3c doctor``: a preflight of the ranks and links a job would run on, before it spends
node-hours. Alone (one process), under ``mpiexec``/``srun`` (every rank runs it) or as
``sbatch slurm/doctor.sh`` with the real job's node count.

Each rank checks itself (:func:`local_report`): its host, the CPUs it is bound to and the
node's count, the MPI library (its name and the file mpi4py loaded), the PMI its launcher
speaks (the variables seen), TensorFlow's version, oneDNN on or off, the thread pools the
config's ``env`` and ``train`` sections would give it, whether the config's game opens (one
simulator), and the free disk under the run directory. Rank 0 (or the one process) also names
the launchers a job would use (:func:`launch_info`): the ``mpiexec`` that ``dba3c launch`` and
``DBA3C_LAUNCHER=mpiexec`` start and the MPI it belongs to, and the ``srun --mpi`` plugin the
sbatch scripts pass (``DBA3C_SRUN_MPI`` when set, read as they read it). Rank 0 gathers the
reports and then measures each pair of rank 0 with another rank,
one pair at a time (no two pairs share a link at once): the median round trip of 8 bytes and
the median rate of 4 MiB ping-pongs, in payload bytes per second one way. Only pairs between
two hosts are compared with each other (pairs on one host move through memory).

Rank 0 prints one table (a row per rank, then the pairs) and exits 0, or 1 with one ``error:``
line naming the first problem (:func:`verdict`). A rank that sends nothing for ``--timeout``
seconds ends the whole job non-zero, named (``Transport.abort``): nothing waits for good.

The measurements and the verdict are pure functions of the reports (:func:`verdict`,
:func:`table`); MPI is reached only through the transport (``dba3c.distributed.transport``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from dba3c.config import Config, is_atari
from dba3c.core import Request, Transport
from dba3c.cpus import binding_warning, bound_cpus, cpu_ranges, threads_for
from dba3c.errors import UserError
from dba3c.launchers.local import find_mpiexec, mpiexec_family, mpiexec_version
from dba3c.launchers.srun_options import (
    library_first_line,
    library_version,
    mpi_family,
    mpi_plugin,
)

DEFAULT_CONFIG = "configs/breakout_64.yaml"
DEFAULT_TIMEOUT_S = 60.0

LATENCY_WARMUP, LATENCY_ROUNDS = 3, 21    # 8-byte round trips: untimed, then timed (median)
BANDWIDTH_BYTES = 4 << 20                 # one message of the bandwidth ping-pong
BANDWIDTH_WARMUP, BANDWIDTH_REPS = 1, 5   # round trips: untimed, then timed (median rate)
SLOW_FRACTION = 0.5                       # a pair below this x the median pair is a problem

# the doctor's tags (it runs alone in its MPI job)
REPORT_TAG, PING_TAG, BULK_TAG, DONE_TAG, ACK_TAG = 1, 2, 3, 4, 5
REPORT_BYTES = 16384                      # a report's JSON, with a 4-byte length in front

# What launchers export to the ranks about their process-management interface: srun's
# plugin, PMIx (Open MPI, srun --mpi=pmix), PMI-1/PMI-2 (MPICH's hydra, srun --mpi=pmi2),
# Open MPI's own and Cray's PALS.
PMI_VARS = ("SLURM_MPI_TYPE", "PMIX_RANK", "PMIX_NAMESPACE", "PMIX_SERVER_URI2",
            "PMIX_SERVER_URI3", "PMIX_SERVER_URI4", "PMIX_SERVER_URI41", "PMI_FD", "PMI_PORT",
            "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_ID", "OMPI_COMM_WORLD_RANK", "PALS_RANKID")


@dataclass(frozen=True)
class RankReport:
    """What one rank found about itself. ``rom_error`` None: the game opened (or the config
    plays no Atari game: ``rom`` then names the gymnasium id and ``rom_atari`` is False)."""

    rank: int
    host: str
    cpus: tuple[int, ...]       # the CPUs it may run on
    node_cpus: int              # the node's CPU count
    mpi: str                    # the MPI library's first line ("" when alone: no MPI)
    pmi: str                    # the PMI in use, from the variables seen
    pmi_vars: tuple[str, ...]   # those variables
    tensorflow: str
    onednn: bool
    threads: tuple[int, int, int]  # simulator, intra-op, inter-op
    rom: str
    rom_atari: bool
    rom_error: str | None
    disk_path: str              # the run directory's nearest existing parent
    disk_free: int              # bytes free there
    mpi_file: str = ""          # the MPI library's file, as loaded ("" unknown)

    def to_json(self) -> str:
        """One JSON object (:meth:`from_json` reads it back)."""
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> RankReport:
        """The report :meth:`to_json` wrote."""
        d = json.loads(text)
        d["cpus"], d["pmi_vars"] = tuple(d["cpus"]), tuple(d["pmi_vars"])
        d["threads"] = tuple(d["threads"])
        return RankReport(**d)


@dataclass(frozen=True)
class LaunchInfo:
    """The launchers a job would start its ranks with, as rank 0 (or the one process) finds
    them: ``mpiexec``, the one ``dba3c launch`` and ``DBA3C_LAUNCHER=mpiexec`` use ("" when
    none is found), and its ``--version`` text; ``srun``, the line saying which ``--mpi``
    plugin the sbatch scripts would pass and why ("" when srun is not on PATH), or
    ``srun_error`` when none fits (``DBA3C_SRUN_MPI`` not offered, or no plugin the MPI
    speaks), a problem only where a job would fail on it (``srun_judged``:
    ``DBA3C_SRUN_MPI`` set, or inside a Slurm job)."""

    mpiexec: str
    mpiexec_version: str
    srun: str
    srun_error: str | None
    srun_judged: bool


@dataclass(frozen=True)
class PairResult:
    """One measured pair: median 8-byte round trip (s) and median ping-pong rate (payload
    bytes per second, one way); ``error`` says why it was not measured (the other rank went
    silent), and the figures are then 0."""

    a: int
    b: int
    latency_s: float
    bytes_per_s: float
    error: str | None = None


# ---------------------------------------------------------------- what the environment says

def pmi_in_use(environ: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """(the PMI the launcher speaks, the :data:`PMI_VARS` set in ``environ``): ``srun
    --mpi=X`` where srun says so, else ``PMIx``, ``PMI`` (PMI-1/2: MPICH's hydra), ``Open
    MPI``, ``Cray PALS``, or ``none`` (a process started alone)."""
    seen = tuple(v for v in PMI_VARS if v in environ)
    if "SLURM_MPI_TYPE" in environ:
        kind = f"srun --mpi={environ['SLURM_MPI_TYPE']}"
    elif any(v.startswith("PMIX_") for v in seen):
        kind = "PMIx"
    elif "PMI_FD" in seen or "PMI_PORT" in seen or "PMI_RANK" in seen:
        kind = "PMI"
    elif "OMPI_COMM_WORLD_RANK" in seen:
        kind = "Open MPI"
    elif "PALS_RANKID" in seen:
        kind = "Cray PALS"
    else:
        kind = "none"
    return kind, seen


def mpi_name(library_version: str) -> str:
    """The MPI library in a few words: ``MPI_Get_library_version``'s first line up to its
    first comma, spaces collapsed (``MPICH Version: 4.3.0``, ``Open MPI v4.1.6``)."""
    return " ".join(library_first_line(library_version).split(",")[0].split())


def loaded_mpi_file(maps: str) -> str:
    """The MPI library's file among a process's mapped files (``/proc/self/maps``): the
    first ``libmpi.so*`` or ``libmpi_<variant>.so*`` (Cray's ``libmpi_gnu_123.so``), not the
    C++/Fortran bindings; "" when none is mapped."""
    for path in re.findall(r"\s(/\S+)$", maps, re.M):
        name = path.rsplit("/", 1)[-1]
        if re.match(r"libmpi(_(?!cxx|usempi|mpifh)[a-z0-9]+)*\.so", name):
            return path
    return ""


def this_mpi_file() -> str:
    """The MPI library file this process has loaded ("" when none, or no /proc)."""
    try:
        return loaded_mpi_file(Path("/proc/self/maps").read_text())
    except OSError:
        return ""


def mpiexec_name(version_text: str) -> str:
    """An ``mpiexec --version`` text in a few words: ``Open MPI 5.0.11``, ``MPICH hydra
    5.0.2``, Intel's first line; "" for no text."""
    found = re.search(r"\(Open MPI\)\s*(\S+)", version_text)
    if found:
        return f"Open MPI {found.group(1)}"
    found = re.search(r"HYDRA build details:\s*Version:\s*(\S+)", version_text)
    if found and "intel" not in version_text.lower():
        return f"MPICH hydra {found.group(1)}"
    lines = [line.strip() for line in version_text.splitlines() if line.strip()]
    return lines[0] if lines else ""


# MPICH, Intel MPI and Cray MPICH speak PMI to one another's launchers; Open MPI speaks PMIx
PMI_KIN = {"mpich": "pmi", "intel": "pmi", "cray-mpich": "pmi", "openmpi": "pmix"}


def launch_problem(launch: LaunchInfo, library: str, library_file: str = "") -> str | None:
    """The launchers' first problem (one line, no ``error:``), or None: an srun choice that
    fails where a job would fail on it, then an mpiexec of another MPI than the library
    mpi4py loads (its ranks would not form one world: the venv's MPI wheel and a site's
    MPI mixed, docs/cluster.md, "Which MPI")."""
    if launch.srun_error and launch.srun_judged:
        return launch.srun_error
    lib_kin = PMI_KIN.get(mpi_family(library))
    exe_kin = PMI_KIN.get(mpiexec_family(launch.mpiexec_version))
    if lib_kin and exe_kin and lib_kin != exe_kin:
        where = f" ({library_file})" if library_file else ""
        return (f"mpiexec {launch.mpiexec} is {mpiexec_name(launch.mpiexec_version)}'s, but "
                f"mpi4py loads {library_first_line(library)}{where}: the ranks it starts "
                f"would not form one MPI world; put that MPI's own mpiexec first on PATH, or "
                f"install the venv for the MPI you load (make install MPI=...; "
                f"docs/cluster.md, \"Which MPI\")")
    return None


def launch_info(environ: Mapping[str, str]) -> LaunchInfo:
    """This machine's :class:`LaunchInfo`: ``mpiexec --version`` of the mpiexec found, and
    :func:`dba3c.launchers.srun_options.mpi_plugin` on ``environ`` (``DBA3C_SRUN_MPI``) as
    the sbatch scripts call it."""
    try:
        mpiexec = find_mpiexec()
    except UserError:
        mpiexec = ""
    version = mpiexec_version(mpiexec) if mpiexec else ""
    srun, srun_error = "", None
    if shutil.which("srun"):
        try:
            srun = mpi_plugin(environ)[1]
        except UserError as e:
            srun_error = str(e)
    judged = bool(environ.get("DBA3C_SRUN_MPI")) or "SLURM_JOB_ID" in environ
    return LaunchInfo(mpiexec, version, srun, srun_error, judged)


def launch_lines(launch: LaunchInfo) -> list[str]:
    """The launchers in two lines: ``mpiexec: PATH (MPI)`` and ``srun: ...``."""
    name = mpiexec_name(launch.mpiexec_version)
    mpiexec = (f"{launch.mpiexec}" + (f" ({name})" if name else "")) if launch.mpiexec else \
        "none found (no MPI wheel in this venv, no mpiexec on PATH)"
    srun = launch.srun.removeprefix("srun ") or launch.srun_error or "not on PATH"
    return [f"mpiexec: {mpiexec}", f"srun: {srun}"]


def disk_free(run_dir: str) -> tuple[str, int]:
    """(the nearest existing directory at or above ``run_dir``, bytes free in its file
    system)."""
    path = Path(run_dir).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return str(path), shutil.disk_usage(path).free


def rom_check(cfg: Config) -> str | None:
    """None when the config's game opens and resets (one simulator), else why not. Games
    that are no Atari ROM (gymnasium ids) are opened the same way."""
    from dba3c.games.envs import make_env_pool

    try:
        pool = make_env_pool(cfg.env, cfg.model, num_envs=1, batch_size=1)
        try:
            pool.reset(seed=0)
        finally:
            pool.close()
    except Exception as e:  # noqa: BLE001 - any failure to open the game is the finding
        return f"{type(e).__name__}: {e}".strip()[:300]
    return None


def local_report(rank: int, cfg: Config, mpi_library: str,
                 environ: Mapping[str, str] | None = None) -> RankReport:
    """This rank's :class:`RankReport` (imports TensorFlow and opens the game once);
    ``environ`` (this process's by default) names the PMI."""
    import tensorflow as tf

    from dba3c.learning.learner import onednn_enabled

    cpus = bound_cpus()
    threads = threads_for(cfg.env, cfg.train, len(cpus))
    pmi, pmi_vars = pmi_in_use(os.environ if environ is None else environ)
    path, free = disk_free(cfg.run.dir)
    return RankReport(
        rank=rank, host=socket.gethostname(), cpus=cpus, node_cpus=os.cpu_count() or 1,
        mpi=mpi_name(mpi_library), pmi=pmi, pmi_vars=pmi_vars, tensorflow=str(tf.__version__),
        onednn=onednn_enabled(),
        threads=(threads.simulators, threads.intra_op, threads.inter_op),
        rom=cfg.env.id, rom_atari=is_atari(cfg.env.id), rom_error=rom_check(cfg),
        disk_path=path, disk_free=free, mpi_file=this_mpi_file())


# ------------------------------------------------------------------- the verdict and table

def ranks_on_nodes(rows: Sequence[RankReport]) -> Counter[str]:
    """How many of the reporting ranks run on each host."""
    return Counter(r.host for r in rows)


def network_pairs(pairs: Sequence[PairResult],
                  hosts: Mapping[int, str]) -> list[PairResult]:
    """The measured pairs whose ranks run on different hosts: those cross a link. (Pairs on
    one host move through memory, at rates that say nothing about links and that swing with
    the host's load: they are shown, not judged.)"""
    return [p for p in pairs if p.error is None and hosts.get(p.a) != hosts.get(p.b)]


def slow_pairs(pairs: Sequence[PairResult],
               hosts: Mapping[int, str]) -> tuple[list[PairResult], float]:
    """(the :func:`network_pairs` below ``SLOW_FRACTION`` x their median rate, slowest
    first; that median)."""
    measured = network_pairs(pairs, hosts)
    if not measured:
        return [], 0.0
    median = statistics.median(p.bytes_per_s for p in measured)
    slow = [p for p in measured if p.bytes_per_s < SLOW_FRACTION * median]
    return sorted(slow, key=lambda p: p.bytes_per_s), median


def _pair_hosts(p: PairResult, hosts: Mapping[int, str]) -> str:
    return f"{hosts.get(p.a, '?')} <-> {hosts.get(p.b, '?')}"


def verdict(rows: Sequence[RankReport], pairs: Sequence[PairResult], *,
            world_size: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
            launch: LaunchInfo | None = None) -> str | None:
    """The first problem, as one line without the ``error:`` prefix, or None when the job
    may run. In this order: ranks of ``world_size`` that sent no report (within
    ``timeout_s``); then the launchers (:func:`launch_problem`, against rank 0's library);
    then rank by rank, a rank bound to fewer CPUs than its share of its node
    (:func:`dba3c.cpus.binding_warning`'s rule, the ranks per node counted from the rows'
    hosts), a game that does not open; then a pair that went silent; then the slowest pair
    between two hosts below ``SLOW_FRACTION`` x the median rate of such pairs
    (:func:`slow_pairs`)."""
    reported = {r.rank for r in rows}
    silent = sorted(set(range(world_size or 0)) - reported)
    if silent:
        return (f"rank(s) {', '.join(map(str, silent))} sent no report within "
                f"{timeout_s:g} s (unreachable, not started, or stuck in their checks); "
                f"{len(reported)} of {world_size} reported")
    first = min(rows, key=lambda r: r.rank, default=None)
    if launch is not None and first is not None:
        problem = launch_problem(launch, first.mpi, first.mpi_file)
        if problem:
            return problem
    per_node = ranks_on_nodes(rows)
    for r in sorted(rows, key=lambda r: r.rank):
        warning = binding_warning(len(r.cpus), r.node_cpus, per_node[r.host])
        if warning:
            return f"rank {r.rank} on {r.host} is {warning}"
        if r.rom_error:
            return (f"rank {r.rank} on {r.host} cannot open the game {r.rom}: {r.rom_error} "
                    f"(reinstall ale-py there: its wheel carries the ROMs)")
    hosts = {r.rank: r.host for r in rows}
    for p in pairs:
        if p.error:
            return f"rank {p.a} <-> rank {p.b} ({_pair_hosts(p, hosts)}): {p.error}"
    slow, median = slow_pairs(pairs, hosts)
    if slow:
        p = slow[0]
        return (f"rank {p.a} <-> rank {p.b} ({_pair_hosts(p, hosts)}) moves "
                f"{p.bytes_per_s / 1e6:.1f} MB/s, below {SLOW_FRACTION:g} x the median of the "
                f"{len(network_pairs(pairs, hosts))} pairs between hosts "
                f"({median / 1e6:.1f} MB/s): check {hosts.get(p.b, '?')}'s link")
    return None


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def _columns(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in [header, *body]]


def table(rows: Sequence[RankReport], pairs: Sequence[PairResult],
          launch: LaunchInfo | None = None) -> str:
    """The doctor's one table: a row per rank (rank order), then a row per pair with its
    latency and rate; the slowest pair between hosts is marked; then the launchers
    (:func:`launch_lines`), each block after an empty line. Ends with a newline."""
    per_node = ranks_on_nodes(rows)
    body = []
    for r in sorted(rows, key=lambda r: r.rank):
        rom = ("ok" if r.rom_error is None else "FAILS") + ("" if r.rom_atari else " (no ROM)")
        body.append([str(r.rank), r.host, f"{len(r.cpus)}/{r.node_cpus} ({cpu_ranges(r.cpus)})",
                     str(per_node[r.host]),
                     (r.mpi or "-") + (f" ({r.mpi_file})" if r.mpi_file else ""),
                     f"{r.pmi}" + (f" [{' '.join(r.pmi_vars)}]" if r.pmi_vars else ""),
                     r.tensorflow, "on" if r.onednn else "off",
                     "/".join(map(str, r.threads)), f"{r.rom} {rom}",
                     f"{_gb(r.disk_free)} ({r.disk_path})"])
    lines = _columns(["rank", "host", "cpus bound/node", "ranks on node", "mpi", "pmi",
                      "tensorflow", "onednn", "threads sim/intra/inter", "game",
                      "disk free (run dir)"], body)
    if pairs:
        hosts = {r.rank: r.host for r in rows}
        measured = network_pairs(pairs, hosts)
        slowest = min(measured, key=lambda p: p.bytes_per_s) if len(measured) > 1 else None

        def note(p: PairResult) -> str:
            if p.error:
                return p.error
            if hosts.get(p.a) == hosts.get(p.b):
                return "one host (memory, not judged)"
            return "slowest" if p is slowest else ""

        pair_rows = [[f"{p.a} <-> {p.b}", _pair_hosts(p, hosts),
                      "-" if p.error else f"{p.latency_s * 1e3:.3f} ms",
                      "-" if p.error else f"{p.bytes_per_s / 1e6:.1f} MB/s", note(p)]
                     for p in pairs]
        lines += [""] + _columns(["pair", "hosts", "latency (8 B)", "bandwidth (4 MiB)", ""],
                                 pair_rows)
    if launch is not None:
        lines += ["", *launch_lines(launch)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- talking between the ranks

def _wait(requests: Sequence[Request], timeout_s: float, max_sleep_s: float) -> bool:
    """Poll until every request completed (True) or ``timeout_s`` passed (False)."""
    from dba3c.distributed.transport.waiting import wait_until

    deadline = time.monotonic() + timeout_s

    def done() -> bool:
        return all(r.test() for r in requests) or time.monotonic() > deadline

    wait_until(done, max_sleep_s=max_sleep_s)
    return all(r.test() for r in requests)


def encode_report(report: RankReport) -> np.ndarray:
    """A report as a fixed-size byte buffer: a 4-byte length, then its JSON."""
    data = report.to_json().encode()
    if len(data) > REPORT_BYTES - 4:
        raise ValueError(f"a report of {len(data)} bytes exceeds {REPORT_BYTES - 4}")
    buf = np.zeros(REPORT_BYTES, np.uint8)
    buf[:4] = np.frombuffer(np.uint32(len(data)).tobytes(), np.uint8)
    buf[4:4 + len(data)] = np.frombuffer(data, np.uint8)
    return buf


def decode_report(buf: np.ndarray) -> RankReport:
    """What :func:`encode_report` wrote."""
    n = int(buf[:4].view(np.uint32)[0])
    return RankReport.from_json(buf[4:4 + n].tobytes().decode())


class Silent(Exception):
    """A rank sent nothing within the timeout."""


def measure_pair(t: Transport, peer: int, timeout_s: float) -> PairResult:
    """Rank 0's side of a pair with ``peer`` (which runs :func:`echo_pair`): the median of
    ``LATENCY_ROUNDS`` 8-byte round trips and the median rate of ``BANDWIDTH_REPS``
    ping-pongs of ``BANDWIDTH_BYTES`` each way, after untimed warm-ups (the first message
    opens the connection). The whole pair gets ``timeout_s``; past it, a PairResult with
    ``error`` set."""
    deadline = time.monotonic() + timeout_s

    def round_trip(out: np.ndarray, back: np.ndarray, tag: int, poll_s: float) -> float:
        start = time.perf_counter()
        recv = t.irecv(back, peer, tag)
        send = t.isend(out, peer, tag)
        if not _wait([send, recv], max(0.0, deadline - time.monotonic()), poll_s):
            raise Silent
        return time.perf_counter() - start

    try:
        small, small_back = np.ones(8, np.uint8), np.zeros(8, np.uint8)
        rtts = [round_trip(small, small_back, PING_TAG, 2e-5)
                for _ in range(LATENCY_WARMUP + LATENCY_ROUNDS)][LATENCY_WARMUP:]
        big, big_back = np.ones(BANDWIDTH_BYTES, np.uint8), np.zeros(BANDWIDTH_BYTES, np.uint8)
        bulk = [round_trip(big, big_back, BULK_TAG, 1e-4)
                for _ in range(BANDWIDTH_WARMUP + BANDWIDTH_REPS)][BANDWIDTH_WARMUP:]
    except Silent:
        return PairResult(0, peer, 0.0, 0.0, f"rank {peer} stopped answering: the pair's "
                          f"measurement did not finish within {timeout_s:g} s")
    return PairResult(0, peer, statistics.median(rtts),
                      statistics.median(2 * BANDWIDTH_BYTES / s for s in bulk))


def echo_pair(t: Transport, first_timeout_s: float, timeout_s: float) -> None:
    """A peer's side of :func:`measure_pair`: send every message from rank 0 back. The first
    may take ``first_timeout_s`` (rank 0 measures the pairs before this one first), the rest
    ``timeout_s`` in all. Raises :class:`Silent` past either."""
    small = np.zeros(8, np.uint8)
    big = np.zeros(BANDWIDTH_BYTES, np.uint8)
    deadline: float | None = None
    plan = [(small, PING_TAG, 2e-5)] * (LATENCY_WARMUP + LATENCY_ROUNDS) + \
        [(big, BULK_TAG, 1e-4)] * (BANDWIDTH_WARMUP + BANDWIDTH_REPS)
    for buf, tag, poll_s in plan:
        recv = t.irecv(buf, 0, tag)
        if deadline is None:  # waiting for our turn: poll rarely
            if not _wait([recv], first_timeout_s, 1e-3):
                raise Silent
            deadline = time.monotonic() + timeout_s
        elif not _wait([recv], max(0.0, deadline - time.monotonic()), poll_s):
            raise Silent
        if not _wait([t.isend(buf, 0, tag)], max(0.0, deadline - time.monotonic()), poll_s):
            raise Silent


@dataclass
class Outcome:
    """What :func:`run_ranks` ends with on rank 0 (other ranks: only ``code``)."""

    code: int
    rows: list[RankReport]
    pairs: list[PairResult]
    problem: str | None
    launch: LaunchInfo | None = None


def run_ranks(t: Transport, report: Callable[[], RankReport], timeout_s: float,
              progress: Callable[[str], None], launch: LaunchInfo | None = None) -> Outcome:
    """Every rank of ``t`` calls it. Each rank makes its ``report``; rank 0 gathers them
    (``timeout_s``), measures each pair of rank 0 with another rank in turn
    (``timeout_s`` per pair), decides (:func:`verdict`, with rank 0's ``launch``) and sends
    every rank the exit code.
    A rank silent past its timeout ends the world with ``t.abort(1)`` after an ``error:``
    line naming it (rank 0 prints the table of what it has first). A rank other than 0
    waits for its pair at most (rank + 2) x ``timeout_s`` and then for the verdict at most
    (size - rank + 1) x ``timeout_s``: only a rank 0 that stopped answering runs into
    those (rank 0 bounds each of its own waits by ``timeout_s``)."""
    rank, size = t.rank, t.size

    def checked() -> RankReport:
        try:
            return report()
        except Exception as e:  # noqa: BLE001 - a rank that cannot check itself ends the job
            print(f"error: rank {rank} on {socket.gethostname()}: its checks failed: {e!r}",
                  file=sys.stderr, flush=True)
            t.abort(1)
            raise

    if rank != 0:
        mine = checked()
        sent = t.isend(encode_report(mine), 0, REPORT_TAG)
        try:
            echo_pair(t, (rank + 2) * timeout_s, timeout_s)
            verdict_code = np.zeros(1, np.int64)
            if not _wait([sent, t.irecv(verdict_code, 0, DONE_TAG)], (size - rank + 1) * timeout_s,
                         1e-3):
                raise Silent
        except Silent:
            print(f"error: rank {rank} on {mine.host}: no message from rank 0 within its "
                  f"timeout ({timeout_s:g} s per wait): rank 0 or its link stopped",
                  file=sys.stderr, flush=True)
            t.abort(1)
            return Outcome(1, [], [], "rank 0 silent")
        ack = np.zeros(1, np.int8)
        _wait([t.isend(ack, 0, ACK_TAG)], timeout_s, 1e-3)
        return Outcome(int(verdict_code[0]), [], [], None)

    progress(f"doctor: {size} rank(s); each checks itself (host, CPUs, MPI, PMI, TensorFlow, "
             f"game, disk)")
    start = time.monotonic()
    rows = [checked()]
    bufs = {r: np.zeros(REPORT_BYTES, np.uint8) for r in range(1, size)}
    recvs = {r: t.irecv(buf, r, REPORT_TAG) for r, buf in bufs.items()}
    _wait(list(recvs.values()), timeout_s, 1e-3)
    rows += [decode_report(bufs[r]) for r in range(1, size) if recvs[r].test()]
    progress(f"doctor: reports from {len(rows)} of {size} rank(s) in "
             f"{time.monotonic() - start:.1f} s")

    def fail(problem: str, pairs: list[PairResult]) -> Outcome:
        print(table(rows, pairs, launch), end="", flush=True)
        print(f"error: {problem}", file=sys.stderr, flush=True)
        t.abort(1)
        return Outcome(1, rows, pairs, problem, launch)

    if len(rows) < size:
        return fail(verdict(rows, [], world_size=size, timeout_s=timeout_s) or "", [])
    pairs: list[PairResult] = []
    if size > 1:
        progress(f"doctor: pairs: rank 0 with each of ranks 1..{size - 1} in turn: "
                 f"{LATENCY_ROUNDS} round trips of 8 bytes, {BANDWIDTH_REPS} of "
                 f"{BANDWIDTH_BYTES >> 20} MiB each way")
    for peer in range(1, size):
        pairs.append(measure_pair(t, peer, timeout_s))
        if pairs[-1].error:
            return fail(verdict(rows, pairs) or "", pairs)
    problem = verdict(rows, pairs, world_size=size, timeout_s=timeout_s, launch=launch)
    code = 1 if problem else 0
    code_buf, ack_bufs = np.full(1, code, np.int64), np.zeros((size, 1), np.int8)
    done = [t.isend(code_buf, r, DONE_TAG) for r in range(1, size)]
    acks = [t.irecv(ack_bufs[r], r, ACK_TAG) for r in range(1, size)]
    _wait(done + acks, timeout_s, 1e-3)
    return Outcome(code, rows, pairs, problem, launch)


def doctor(config: str, overrides: Sequence[str], timeout_s: float, world_size: int,
           json_path: str | None = None, out: TextIO | None = None,
           environ: Mapping[str, str] | None = None) -> int:
    """``dba3c doctor``: alone (``world_size`` 1: no MPI) or as one rank of an MPI job.
    ``environ`` (the launcher's environment: this process's by default) names the PMI and
    holds ``DBA3C_SRUN_MPI``, which rank 0 reads as the sbatch scripts do (:func:`launch_info`).
    Rank 0 prints progress on stderr, the table on ``out`` (stdout) and the first problem
    as one ``error:`` line; ``json_path``: rank 0 also writes the rows, pairs, launchers and
    problem there (not when a silent rank ends the job).
    Returns the exit code (0, or 1 for a problem; every rank returns rank 0's)."""
    from dba3c.outputs import check_output_file
    from dba3c.preset import load_config

    if not timeout_s > 0:
        raise UserError(f"--timeout {timeout_s:g} must be a positive number of seconds")
    if json_path:
        check_output_file(json_path, f"--json {json_path}")  # not after minutes of checks
    cfg = load_config(config, list(overrides))
    out = out or sys.stdout
    env: Mapping[str, str] = os.environ if environ is None else environ

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if world_size == 1:
        progress("doctor: 1 rank (no MPI job): checking this process")
        rows = [local_report(0, cfg, library_version(), env)]  # asked without starting MPI
        launch = launch_info(env)
        problem = verdict(rows, [], world_size=1, launch=launch)
        outcome = Outcome(1 if problem else 0, rows, [], problem, launch)
    else:
        from dba3c.distributed.transport.mpi import MpiTransport

        t = MpiTransport(cfg.dist.collective_algorithm)
        library = library_version()  # after MPI started (asked first, it keeps MPI off)
        outcome = run_ranks(t, lambda: local_report(t.rank, cfg, library, env), timeout_s,
                            progress, launch_info(env) if t.rank == 0 else None)
        if t.rank != 0:
            return outcome.code
    print(table(outcome.rows, outcome.pairs, outcome.launch), end="", file=out, flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps(
            {"rows": [asdict(r) for r in outcome.rows],
             "pairs": [asdict(p) for p in outcome.pairs],
             "launch": asdict(outcome.launch) if outcome.launch else None,
             "problem": outcome.problem},
            indent=1) + "\n")
    if outcome.problem:
        print(f"error: {outcome.problem}", file=sys.stderr, flush=True)
    return outcome.code
