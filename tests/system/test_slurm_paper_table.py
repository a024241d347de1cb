"""slurm/paper_table.sh, the job array over the paper's games x seeds, on an emulated 2-node
Slurm at tiny scale: each array task trains its game and seed (1 worker on node1, 1
parameter server on node2, synthetic data) in its own run directory, and a task that gets
SIGUSR2 as at its time limit checkpoints, requeues itself alone and resumes without a gap.

The module starts that cluster and stops it afterwards."""

from __future__ import annotations

import subprocess
import time

import pytest
import yaml

from tests.support import read_jsonl
from tests.support.cluster import running_cluster
from tests.support.slurm import job_info, sbatch, wait_job

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TINY = ["dist.ps=1", "eval.rank=false", "eval.every=0", "debug.synthetic_data=true",
        "model.kind=a3c_ff", "train.batch_size=8", "train.max_steps=200",
        "run.checkpoint_every=1000", "run.log_every=1", "run.progress=none"]


@pytest.fixture(scope="module")
def two_nodes():
    with running_cluster("--nodes", "2"):
        yield


def test_each_array_task_runs_its_game_and_seed_and_resumes_after_its_time_limit(
        two_nodes, tmp_path):
    # games "pong boxing": task 1 is boxing with seed 0, task 2 pong with seed 1
    table = tmp_path / "paper"
    job = sbatch(f"--export=ALL,DBA3C_GAMES=pong boxing,DBA3C_TABLE_DIR={table}",
                 "--array=1-2", "-N2", "-n2", "-o", tmp_path / "%a.out", "slurm/paper_table.sh",
                 *TINY)
    pong = table / "pong_64" / "seed1"
    deadline = time.monotonic() + 240
    while not (pong / "metrics.jsonl").exists() or \
            len((pong / "metrics.jsonl").read_text().splitlines()) < 10:
        assert time.monotonic() < deadline, job_info(f"{job}_2")
        time.sleep(0.5)
    # what Slurm sends the batch script 120 s before the time limit
    subprocess.run(["scancel", "--batch", "--signal=USR2", f"{job}_2"], check=True)
    for task, game, seed in ((1, "boxing", 0), (2, "pong", 1)):
        info = wait_job(f"{job}_{task}", tmp_path / f"{task}.out", timeout=240)
        log = (tmp_path / f"{task}.out").read_text()
        assert info["JobState"] == "COMPLETED", log[-3000:]
        assert f"dba3c: array task {task} of job {job}: {game}, seed {seed}" in log
        run = table / f"{game}_64" / f"seed{seed}"
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert (config["env"]["id"], config["run"]["seed"]) == (game, seed)
        assert config["eval"]["target_score"] == {"pong": 20, "boxing": 98}[game]
        assert config["adam"]["epsilon"] == {"pong": 1e-3, "boxing": 1e-8}[game]
        assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, 201))
    assert int(job_info(f"{job}_1")["Restarts"]) == 0
    assert int(info["Restarts"]) >= 1 and "SIGUSR2 received" in log and "(restart 1)" in log
    stops = sorted(int(p.name[5:15]) for p in (pong / "checkpoints").iterdir())
    assert stops[0] < 200 and stops[-1] == 200  # the signal's checkpoint, then the end
