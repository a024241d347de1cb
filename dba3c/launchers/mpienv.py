"""What the process environment says about the MPI world and the Slurm job this process
belongs to."""

from __future__ import annotations

import os

# Set by MPICH/Hydra (PMI_SIZE), Open MPI, Slurm's srun (PMI2 exports PMI_SIZE too).
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS_TOTAL")


def world_size_hint() -> int:
    """The MPI world size announced by the launcher (1 when not launched under MPI), so a
    plain ``dba3c train`` never initialises MPI."""
    for name in _SIZE_VARS:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 1


def slurm_job_id() -> str | None:
    """The Slurm job this process runs in (None outside Slurm): a run records it with its
    lock on the run directory, so a later run can ask Slurm whether the holder still runs."""
    return os.environ.get("SLURM_JOB_ID") or None
