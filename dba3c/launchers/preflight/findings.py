"""What the preflight finds: a rank's :class:`RankReport`, rank 0's :class:`LaunchInfo` and a
measured :class:`PairResult`."""

from __future__ import annotations

from dataclasses import dataclass


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
    precision: str = ""         # what it would train in (model.precision on its CPU)
    native_bfloat16: bool = False  # its CPU computes bfloat16 natively


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
