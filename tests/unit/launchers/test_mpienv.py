"""dba3c.launchers.mpienv: the world size each launcher announces, so that only ranks of an
MPI job start MPI."""

import pytest

from dba3c.launchers.mpienv import world_size_hint


@pytest.mark.parametrize(("environ", "size"), [
    ({}, 1),
    ({"PMI_SIZE": "4", "PMI_RANK": "0"}, 4),                        # MPICH's mpiexec, srun pmi2
    ({"OMPI_COMM_WORLD_SIZE": "3", "PMIX_RANK": "0"}, 3),           # Open MPI's mpiexec
    # srun --mpi=pmix exports no size: the step's tasks (Open MPI 5 ranks under Slurm)
    ({"PMIX_RANK": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2"}, 2),
    # a job's batch script is no rank: Slurm's counts alone start no MPI
    ({"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "69"}, 1),
])
def test_the_world_size_is_the_launchers(environ, size):
    assert world_size_hint(environ) == size
