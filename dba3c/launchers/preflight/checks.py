"""What a rank finds about itself (:func:`local_report`: its host, CPUs, MPI library, PMI,
TensorFlow, thread pools, precision, game and disk), and what rank 0 finds about the launchers a job
would use (:func:`launch_info`)."""

from __future__ import annotations

import os
import re
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path

from dba3c.config import Config, is_atari
from dba3c.cpus import bound_cpus, this_cpu_precision, threads_for
from dba3c.errors import UserError
from dba3c.launchers.local import find_mpiexec, mpiexec_version
from dba3c.launchers.preflight.findings import LaunchInfo, RankReport
from dba3c.launchers.srun_options import library_first_line, mpi_plugin

# What launchers export to the ranks about their process-management interface: srun's
# plugin, PMIx (Open MPI, srun --mpi=pmix), PMI-1/PMI-2 (MPICH's hydra, srun --mpi=pmi2),
# Open MPI's own and Cray's PALS.
PMI_VARS = ("SLURM_MPI_TYPE", "PMIX_RANK", "PMIX_NAMESPACE", "PMIX_SERVER_URI2",
            "PMIX_SERVER_URI3", "PMIX_SERVER_URI4", "PMIX_SERVER_URI41", "PMI_FD", "PMI_PORT",
            "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_ID", "OMPI_COMM_WORLD_RANK", "PALS_RANKID")


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
    precision = this_cpu_precision(cfg.model.precision)
    return RankReport(
        rank=rank, host=socket.gethostname(), cpus=cpus, node_cpus=os.cpu_count() or 1,
        mpi=mpi_name(mpi_library), pmi=pmi, pmi_vars=pmi_vars, tensorflow=str(tf.__version__),
        onednn=onednn_enabled(),
        threads=(threads.simulators, threads.intra_op, threads.inter_op),
        rom=cfg.env.id, rom_atari=is_atari(cfg.env.id), rom_error=rom_check(cfg),
        disk_path=path, disk_free=free, mpi_file=this_mpi_file(), precision=precision.dtype,
        native_bfloat16=precision.native_bfloat16)
