"""What the process environment says about the MPI world this process belongs to."""

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
