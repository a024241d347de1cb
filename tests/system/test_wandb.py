"""Weights & Biases logging (``run.wandb``) through the command line: a clear error without
the package."""

from __future__ import annotations

import importlib.machinery
import importlib.util

import pytest

from tests.support import dba3c

HAVE_WANDB = importlib.util.find_spec("wandb") is not None


@pytest.mark.skipif(HAVE_WANDB, reason="wandb is installed: nothing is missing")
def test_run_wandb_without_the_package_is_a_clear_error(tmp_path):
    run_dir = tmp_path / "run"
    proc = dba3c("train", "configs/cartpole.yaml", f"run.dir={run_dir}", "run.wandb=true",
                 check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: run.wandb=true needs the wandb package, which is not installed "
        "(pip install 'dba3c[wandb]', or set run.wandb=false)"]
    assert not run_dir.exists()
