"""Shared test helpers: run the real ``dba3c`` command line in a subprocess, read a run's
files, compare arrays, build configs. The modules beside this one hold the helpers of one
kind each: ``world`` (ranks as threads on the in-process transport), ``jobs`` (real jobs and
their processes), ``slurm`` (a local Slurm), ``scale`` (points of ``dba3c bench scale``),
``adam`` (the update-rule tests' hyperparameters and gradients), ``rundirs`` (run
directories written by hand for the analysis), ``preflight`` (a rank's preflight report made
by hand). No test file imports another; what two of them share lives here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from dba3c.config import Config
from dba3c.learning.params import ParamLayout
from dba3c.preset import from_dict

ROOT = Path(__file__).resolve().parents[2]
def dba3c(*args, timeout=300, check=True, env=None, **kw) -> subprocess.CompletedProcess:
    """Run ``python -m dba3c ARGS`` from the repository root; output captured as text."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "dba3c", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=full_env, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"dba3c {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stderr[-4000:]}")
    return proc


def python_output(code: str, timeout: float) -> list[str]:
    """The words ``code`` prints in a fresh Python process (which must succeed in
    ``timeout`` seconds) started in the repository root."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def read_jsonl(path: Path) -> list[dict]:
    """Every JSON line of a file; strict (a torn line fails), unlike dba3c.training.rundir's reader,
    so tests check the files independently of it."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def latest_checkpoint(run_dir: Path):
    """The newest checkpoint of a run directory."""
    from dba3c.training import checkpoint
    from dba3c.training.rundir import RunDir

    return checkpoint.load_latest(RunDir(run_dir).checkpoints_dir)


def assert_close(a: np.ndarray, b: np.ndarray, tol: float = 1e-6) -> None:
    """Elementwise |a - b| <= tol * (1 + |b|)."""
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# seeded random batches instead of simulators, no evaluation, quiet, a metrics line a step
SYNTH = ["debug.synthetic_data=true", "eval.every=0", "run.progress=none", "run.log_every=1"]


NO_PARAMS = ParamLayout((), ())  # the layout of a Chief that saves no checkpoint


def cfg_with(**sections) -> Config:
    """A validated default config with some sections overridden: cfg_with(dist={"ps": 2})."""
    return from_dict(sections)


COLLECTIVE = {"aggregation": "collective", "ps": 0}  # a config's dist section
