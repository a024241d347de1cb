"""A preflight report made by hand: one rank's :class:`RankReport`, all good unless told."""

from __future__ import annotations

from dba3c.launchers.preflight.findings import RankReport


def row(rank: int, host: str | None = None, cpus: int = 12, node_cpus: int = 12,
        rom_error: str | None = None) -> RankReport:
    return RankReport(rank=rank, host=host or f"node{rank + 1}", cpus=tuple(range(cpus)),
                      node_cpus=node_cpus, mpi="MPICH Version: 4.3.0", pmi="srun --mpi=pmi2",
                      pmi_vars=("SLURM_MPI_TYPE", "PMI_FD", "PMI_RANK", "PMI_SIZE"),
                      tensorflow="2.21.0", onednn=True, threads=(10, cpus, cpus),
                      rom="breakout", rom_atari=True, rom_error=rom_error,
                      disk_path="/scratch", disk_free=500 * 10**9)
