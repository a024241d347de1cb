"""Jobs on a local Slurm (``slurm/local-cluster.sh``): submit, wait, and the SIGUSR2 requeue
check that the single-node and the emulated multi-node cluster both run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from tests.support import ROOT, read_jsonl

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
EMULATED_NODE = re.compile(r"node\d+")


def assert_one_rank_per_node(hosts: list[str], ranks: int) -> None:
    """``hosts`` (rank order) puts ``ranks`` ranks on as many distinct emulated nodes. Which
    nodes Slurm picks is its own choice (a node still completing the last job is passed
    over), so only the spread is asserted, never the names."""
    assert len(hosts) == ranks and len(set(hosts)) == ranks, hosts
    assert all(EMULATED_NODE.fullmatch(h) for h in hosts), hosts


def sbatch(*args) -> str:
    """Submit from the repository root with this Python's venv as the job's
    (``DBA3C_VENV``: the jobs run on the MPI the tests run on); return the job id."""
    out = subprocess.run(["sbatch", "--parsable", *map(str, args)], cwd=ROOT,
                         env=dict(os.environ, DBA3C_VENV=sys.prefix),
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


# slurm/breakout_64.sh's overrides for 1 worker + 1 PS on seeded random batches, quiet
REQUEUE_RUN = ("dist.ps=1", "eval.rank=false", "eval.every=0", "debug.synthetic_data=true",
               "model.kind=a3c_ff", "train.batch_size=8", "run.log_every=1",
               "run.checkpoint_every=1000", "run.progress=none")


def check_usr2_requeue_resumes_without_gap(tmp_path, *placement: str) -> None:
    """A 1 worker + 1 PS job placed by the sbatch options ``placement`` gets SIGUSR2 after
    10 steps: it checkpoints, requeues itself and ends at step 300 with no gap or repeat."""
    run = tmp_path / "run"
    job = sbatch(*placement, "-o", tmp_path / "%j.out", "slurm/breakout_64.sh",
                 *REQUEUE_RUN, "train.max_steps=300", f"run.dir={run}")
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
