"""Synthetic-compute ranks and the stall watchdog in real jobs.

- Synthetic ranks: the config refuses what they cannot do; a 16-worker, 4-PS run through
  ``dba3c launch`` ends at exactly ``train.max_steps`` with parameters equal to Adam applied
  (here, independently) to the mean of the seeded gradients, imports no TensorFlow in any
  rank and stays under 150 MB of peak RSS per process.
- Stall watchdog: real runs in which one rank is SIGSTOPped (it stops answering without
  dying): the job ends non-zero within stall_timeout + 30 s with one error line naming that
  rank."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from dba3c.learning.models import NetSpec
from tests.support import ROOT, dba3c, latest_checkpoint, read_jsonl
from tests.support.jobs import SEED, SYN, reference_run, stall_error


# ---- configuration and the pure pieces ------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["train", "configs/breakout.yaml", "synthetic.enabled=true"],
     "eval.every=1000 needs a network, and synthetic.enabled=true runs none"),
    (["train", "configs/breakout_64.yaml", "synthetic.enabled=true", "eval.every=0"],
     "eval.rank=true: synthetic.enabled=true runs no evaluator rank"),
    (["train", "configs/breakout.yaml", *SYN, "dist.workers=2", "synthetic.slow_workers=3"],
     "synthetic.slow_workers=3 must be <= dist.workers=2"),
    (["train", "configs/breakout.yaml", *SYN, "synthetic.slow_factor=0.5"],
     "synthetic.slow_factor=0.5 must be a number in [1, inf]"),
    (["train", "configs/breakout.yaml", *SYN],  # one process has no parameter servers
     "synthetic.enabled=true needs parameter-server ranks"),
    (["launch", "configs/breakout.yaml", "--workers", "2", *SYN, "dist.stall_timeout=-1"],
     "dist.stall_timeout=-1 must be a number in [0, inf]"),
])
def test_bad_synthetic_settings_are_refused_with_one_line(tmp_path, args, expected):
    run = tmp_path / "run"
    proc = dba3c(*args, f"run.dir={run}", check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert not run.exists()


def test_more_slow_workers_than_the_world_gives_are_refused_by_the_config_rule(tmp_path):
    # no dist.workers: the ranks learn the number of workers from the world size and check
    # the config again with it (after mpiexec's own "launch:" line)
    proc = dba3c("launch", "configs/breakout.yaml", "--workers", "2", *SYN,
                 "synthetic.slow_workers=3", f"run.dir={tmp_path / 'run'}", check=False,
                 timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert errors == ["error: synthetic.slow_workers=3 must be <= dist.workers=2"]
    assert not (tmp_path / "run").exists()


# ---- a synthetic run at scale -------------------------------------------------------------
NUM_WORKERS, NUM_PS, STEPS = 16, 4, 12  # and run.seed=SEED
TF_IMPORT = re.compile(r"\|\s*tensorflow(\.\S+)?$")  # importtime lines of real TensorFlow


def reference_theta(theta0: np.ndarray, workers: list[int], steps: int) -> np.ndarray:
    """Adam (beta1 0.8, beta2 0.75, epsilon 1e-8, lr 1e-3; float64 here) on the mean of the
    gradients of ``workers``: 1e-3 x standard normals seeded by (seed, rank, step)."""
    return reference_run(theta0, lambda _step: workers, steps)


def test_sixteen_synthetic_workers_and_four_ps_run_exact_steps_without_tensorflow(tmp_path):
    run = tmp_path / "run"
    launch = [sys.executable, "-m", "dba3c", "launch", "configs/breakout_64.yaml",
              "--workers", NUM_WORKERS, "--ps", NUM_PS, *SYN, "synthetic.compute_ms=50",
              f"train.max_steps={STEPS}", f"run.seed={SEED}", "run.checkpoint_every=5",
              "run.log_every=1", f"run.dir={run}"]
    # the peak RSS of every process below the wrapper (ranks, mpiexec, the launcher) is the
    # wrapper's RUSAGE_CHILDREN maximum: each level waits for its children
    wrapper = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", wrapper, *map(str, launch)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPROFILEIMPORTTIME="1"))
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    world = NUM_WORKERS + NUM_PS
    # every rank reached the protocol (imported it), none imported TensorFlow
    assert len(re.findall(r"\|\s*dba3c\.distributed\.run$", proc.stderr, re.MULTILINE)) == world
    assert not [line for line in proc.stderr.splitlines() if TF_IMPORT.search(line)]
    peak_mb = int(proc.stdout.split()[-1]) / 1024
    print(f"{world} ranks: {wall:.0f} s, peak RSS of the largest process {peak_mb:.0f} MB")
    assert peak_mb <= 150

    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_step"] == STEPS and "max_steps" in summary["stop_reason"]
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["dist/replicas"] == NUM_WORKERS and last["perf/effective_batch"] == 512
    ckpt = latest_checkpoint(run)
    assert ckpt.step == STEPS and ckpt.adam_count == STEPS
    spec = NetSpec("ba3c", 128, (4, 84, 84), 4)  # Breakout: 4 actions
    workers = [0, *range(1 + NUM_PS, world)]  # the chief trains
    expected = reference_theta(spec.init_params(SEED), workers, STEPS)
    np.testing.assert_allclose(ckpt.theta, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stopped, role", [(4, "worker"), (2, "ps")])
def test_a_rank_that_stops_answering_ends_the_job_naming_it(tmp_path, stopped, role):
    # chief + worker 0, ps 1-2, workers 3-4
    error = stall_error(["launch", "configs/breakout.yaml", "--workers", 3, "--ps", 2, *SYN,
                         "synthetic.compute_ms=20", "train.max_steps=1000000",
                         "run.checkpoint_every=0"], tmp_path / "run", stopped, timeout=5)
    assert ("do not answer" if role == "ps" else "no gradient for step") in error
