"""The preflight's verdict (:func:`verdict`: the first problem, or None) and its table
(:func:`table`): pure functions of the findings."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

from dba3c.cpus import binding_warning, cpu_ranges
from dba3c.launchers.local import mpiexec_family
from dba3c.launchers.preflight.findings import LaunchInfo, PairResult, RankReport
from dba3c.launchers.srun_options import library_first_line, mpi_family

DEFAULT_TIMEOUT_S = 60.0  # how long a rank may stay silent (dba3c doctor --timeout)
SLOW_FRACTION = 0.5       # a pair below this x the median pair is a problem


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


def launch_lines(launch: LaunchInfo) -> list[str]:
    """The launchers in two lines: ``mpiexec: PATH (MPI)`` and ``srun: ...``."""
    name = mpiexec_name(launch.mpiexec_version)
    mpiexec = (f"{launch.mpiexec}" + (f" ({name})" if name else "")) if launch.mpiexec else \
        "none found (no MPI wheel in this venv, no mpiexec on PATH)"
    srun = launch.srun.removeprefix("srun ") or launch.srun_error or "not on PATH"
    return [f"mpiexec: {mpiexec}", f"srun: {srun}"]


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


def precision_cell(r: RankReport) -> str:
    """What a rank would train in and whether its CPU has native bfloat16 (``model.precision:
    auto`` takes bfloat16 only where it has): ``bfloat16 (native bf16)``, ``float32 (no
    native bf16)``, ..."""
    return f"{r.precision or '-'} ({'' if r.native_bfloat16 else 'no '}native bf16)"


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
                     "/".join(map(str, r.threads)), precision_cell(r), f"{r.rom} {rom}",
                     f"{_gb(r.disk_free)} ({r.disk_path})"])
    lines = _columns(["rank", "host", "cpus bound/node", "ranks on node", "mpi", "pmi",
                      "tensorflow", "onednn", "threads sim/intra/inter", "precision", "game",
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
