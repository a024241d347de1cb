"""What the process environment says about the MPI world and the Slurm job this process
belongs to."""

from __future__ import annotations

import os
from collections.abc import Mapping

# Set by MPICH/Hydra (PMI_SIZE), Open MPI's mpiexec, Slurm's srun (PMI2 exports PMI_SIZE too).
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS_TOTAL")


def world_size_hint(environ: Mapping[str, str] | None = None) -> int:
    """The MPI world size announced by the launcher (1 when not launched under MPI), so a
    plain ``dba3c train`` never initialises MPI. ``srun --mpi=pmix`` (Open MPI 5) exports no
    size, only PMIx's contact (``PMIX_RANK``): there the step's task count is the world's."""
    env = os.environ if environ is None else environ
    for name in _SIZE_VARS:
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    step_tasks = env.get("SLURM_STEP_NUM_TASKS", "")
    if "PMIX_RANK" in env and step_tasks.isdigit():
        return int(step_tasks)
    return 1


def slurm_job_id() -> str | None:
    """The Slurm job this process runs in (None outside Slurm): a run records it with its
    lock on the run directory, so a later run can ask Slurm whether the holder still runs."""
    return os.environ.get("SLURM_JOB_ID") or None
