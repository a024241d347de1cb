"""The job scripts and the submitit launcher on a real single-node Slurm.

The module starts the local cluster (slurm/local-cluster.sh, which installs the Debian packages
when missing) and stops it afterwards if it started it. Where Slurm cannot be had (not root
and not installed, no package registry), these tests skip with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, read_jsonl

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
CLUSTER = ["bash", str(ROOT / "slurm" / "local-cluster.sh")]
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


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


def sbatch(*args) -> str:
    """Submit from the repository root; return the job id."""
    out = subprocess.run(["sbatch", "--parsable", *map(str, args)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip().split(";")[0]


def job_info(job_id: str) -> dict:
    """``scontrol show job`` as a dict."""
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                         text=True).stdout
    return dict(re.findall(r"(\w+)=(\S+)", out))


def wait_job(job_id: str, log, timeout: float = 300) -> dict:
    """Wait until the job reaches a final state; on timeout cancel it and show its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = job_info(job_id)
        if info.get("JobState") in FINAL:
            return info
        time.sleep(2)
    subprocess.run(["scancel", job_id])
    tail = log.read_text()[-3000:] if log.exists() else "(no log)"
    raise AssertionError(f"job {job_id} did not finish in {timeout} s: "
                         f"{job_info(job_id).get('JobState')}; log:\n{tail}")


def test_sbatch_breakout_64_at_tiny_scale(slurm, tmp_path):
    run = tmp_path / "run"
    job = sbatch("-N1", "-n6", "-o", tmp_path / "%j.out", "slurm/breakout_64.sh",
                 "train.max_steps=3", f"run.dir={run}", "run.log_every=1", "run.progress=none")
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


def check_usr2_requeue_resumes_without_gap(tmp_path, *placement: str) -> None:
    """A 1 worker + 1 PS job placed by the sbatch options ``placement`` gets SIGUSR2 after
    10 steps: it checkpoints, requeues itself and ends at step 300 with no gap or repeat."""
    run = tmp_path / "run"
    job = sbatch(*placement, "-o", tmp_path / "%j.out", "slurm/breakout_64.sh",
                 "dist.ps=1", "eval.rank=false", "eval.every=0", "debug.synthetic_data=true",
                 "model.kind=a3c_ff", "train.batch_size=8", "train.max_steps=300",
                 "run.log_every=1", "run.checkpoint_every=1000", f"run.dir={run}",
                 "run.progress=none")
    deadline = time.monotonic() + 180
    while not (run / "metrics.jsonl").exists() or \
            len((run / "metrics.jsonl").read_text().splitlines()) < 10:
        assert time.monotonic() < deadline, job_info(job)
        time.sleep(0.5)
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    info = wait_job(job, tmp_path / f"{job}.out")
    log = (tmp_path / f"{job}.out").read_text()
    assert info["JobState"] == "COMPLETED" and int(info["Restarts"]) >= 1, log[-3000:]
    assert "stopped by signal SIGUSR2; requeueing" in log and "(restart 1)" in log
    stops = sorted(int(p.name[5:15]) for p in (run / "checkpoints").iterdir())
    assert stops[0] < 300 and stops[-1] == 300  # the signal's checkpoint, then the end
    steps = [m["step"] for m in read_jsonl(run / "metrics.jsonl")]
    assert steps == list(range(1, 301))  # no gap, no repeat across the requeue


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
