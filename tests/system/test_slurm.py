"""The job scripts and the submitit launcher on a real single-node Slurm.

The module starts the local cluster (slurm/local-cluster.sh, which installs the Debian packages
when missing) and stops it afterwards if it started it. Where Slurm cannot be had (not root
and not installed, no package registry), these tests skip with the reason.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.support import ROOT, read_jsonl
from tests.support.slurm import (
    REQUEUE_RUN,
    check_usr2_requeue_resumes_without_gap,
    sbatch,
    wait_job,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
CLUSTER = ["bash", str(ROOT / "slurm" / "local-cluster.sh")]


@pytest.fixture(scope="module")
def slurm():
    """A running local Slurm for this module."""
    if subprocess.run([*CLUSTER, "status"], capture_output=True).returncode == 0:
        yield
        return
    if os.geteuid() != 0 and shutil.which("sbatch") is None:
        pytest.skip("Slurm is not installed and installing it needs root")
    start = subprocess.run([*CLUSTER, "start"], capture_output=True, text=True, timeout=600)
    if start.returncode != 0:
        pytest.skip(f"cannot start a local Slurm here: {start.stderr.strip()[-300:]}")
    try:
        yield
    finally:
        subprocess.run([*CLUSTER, "stop"], capture_output=True, timeout=120)


def test_sbatch_breakout_64_at_tiny_scale(slurm, tmp_path):
    """The evaluator rank plays the final parameters (eval.every=2: a run that ends before
    eval.every is not evaluated at the end): 2 games cut at 2000 frames (50 games of a policy
    that never serves play to the 18,000-frame cap: 10 minutes on this machine)."""
    run = tmp_path / "run"
    job = sbatch("-N1", "-n6", "-o", tmp_path / "%j.out", "slurm/breakout_64.sh",
                 "train.max_steps=3", f"run.dir={run}", "run.log_every=1", "run.progress=none",
                 "eval.every=2", "eval.episodes=2", "eval.max_frames=2000")
    info = wait_job(job, tmp_path / f"{job}.out")
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", log[-3000:]
    assert "rank 5: evaluator" in log and "ranks 1-4: parameter servers" in log
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    last = metrics[-1]
    assert {f"dist/dropped_late/ps{p}" for p in (1, 2, 3, 4)} <= set(last)  # every PS
    assert any(m["perf/data_points_per_s"] > 0 for m in metrics)  # the training worker
    assert json.loads((run / "summary.json").read_text())["final_step"] == 3
    # step 2's evaluation may have been overtaken by the final one (the newest snapshot wins)
    assert [(e["step"], e["episodes"]) for e in read_jsonl(run / "eval.jsonl")] in (
        [(2, 2), (3, 2)], [(3, 2)])


def test_too_few_tasks_fail_at_once_with_a_clear_error(slurm, tmp_path):
    job = sbatch("-N1", "-n5", "-o", tmp_path / "%j.out", "slurm/breakout_64.sh",
                 f"run.dir={tmp_path / 'run'}")
    info = wait_job(job, tmp_path / f"{job}.out", timeout=120)
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "FAILED" and info["ExitCode"].startswith("2:")
    assert "error: world size 5 is too small" in log
    assert not (tmp_path / "run").exists()


def test_usr2_checkpoints_requeues_and_resumes_without_gap(slurm, tmp_path):
    check_usr2_requeue_resumes_without_gap(tmp_path, "-N1", "-n2")


def test_a_requeued_job_takes_over_the_lock_its_lost_run_kept(slurm, tmp_path):
    """As after a node failure: the run directory's lock names this very job on a host that
    is gone, and its flock is still held (a network file system keeps a lost client's lock
    until its lease ends; here the test holds it). The job, submitted held so that its id
    can be recorded first, takes the lock over with one line and trains."""
    run = tmp_path / "run"
    job = sbatch("--hold", "-N1", "-n2", "-o", tmp_path / "%j.out", "slurm/breakout_64.sh",
                 *REQUEUE_RUN, "train.max_steps=5", f"run.dir={run}")
    run.mkdir()
    lost = {"host": "lost-node", "pid": 4242, "job": job, "started": "2026-11-27T10:00:00+00:00"}
    (run / "run.lock").write_text(json.dumps(lost))
    kept = os.open(run / "run.lock", os.O_RDWR)
    fcntl.flock(kept, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        subprocess.run(["scontrol", "release", job], check=True)
        info = wait_job(job, tmp_path / f"{job}.out")
    finally:
        os.close(kept)
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "COMPLETED", log[-3000:]
    assert (f"taking over {run} from the run of pid 4242 on host lost-node, Slurm job {job}, "
            f"started {lost['started']}: Slurm requeued job {job}, which now runs here"
            in log), log[-3000:]
    assert json.loads((run / "summary.json").read_text())["final_step"] == 5
    assert not (run / "run.lock").exists()


def test_submitit_job_with_two_tasks_returns_a_result(slurm, tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "dba3c", "submit", "configs/cartpole.yaml", "--tasks-per-node",
         "2", "--ps", "1", "--wait", "--folder", str(tmp_path / "submitit" / "%j"),
         "train.max_steps=30", "eval.every=0", f"run.dir={run}", "run.progress=none"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert summary["final_step"] == 30 and summary["stop_reason"] == "train.max_steps=30 reached"
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["dist/replicas"] == 1 and "dist/dropped_late/ps1" in last  # a 2-rank world
