"""A resumed run and its config, through the real command line: the same config continues; a
change of what the run learns (train.lr, run.seed) is refused with one line naming each key
and both values, exit 2, the run directory byte for byte as it was (one process, and rank 0
of an MPI job); a change run.allow_changes names continues and is recorded with its step in
config_history.jsonl; a time limit may change freely; a run with nothing left to train
keeps its summary's last evaluation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.support import dba3c, latest_checkpoint, read_jsonl

# a3c_ff on Breakout with seeded random batches: 4 steps in seconds, a checkpoint every 2
TINY = ["configs/breakout.yaml", "model.kind=a3c_ff", "debug.synthetic_data=true",
        "train.batch_size=4", "train.max_seconds=0", "eval.every=0", "run.progress=none",
        "run.log_every=1", "run.checkpoint_every=2"]


def files(run: Path) -> dict[str, bytes]:
    """Every file under ``run`` with its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file()}


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run trained to its train.max_steps=4, checkpoints at steps 2 and 4."""
    run = tmp_path_factory.mktemp("trained") / "run"
    dba3c("train", *TINY, "train.max_steps=4", f"run.dir={run}")
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained run, for one test to resume."""
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def test_a_resume_with_the_same_config_continues(tmp_path):
    """A run that crashed after its checkpoint at step 4 (its step-6 checkpoint is gone),
    started again with the same command, trains steps 5 and 6 again."""
    run = tmp_path / "run"
    dba3c("train", *TINY, "train.max_steps=6", f"run.dir={run}")
    (run / "checkpoints" / "step-0000000006.ckpt").unlink()
    config = (run / "config.yaml").read_bytes()
    dba3c("train", *TINY, "train.max_steps=6", f"run.dir={run}")
    assert latest_checkpoint(run).step == 6
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    assert (run / "config.yaml").read_bytes() == config
    assert not (run / "config_history.jsonl").exists()


def refusal(run, said: str, keys: str) -> str:
    """The one line that refuses a resume of ``run`` (trained to step 4) changing ``said``."""
    return (f"error: {run} was trained to step 4 with another config; resuming it would "
            f"change what it learns: {said}. Resume with the run's values (its config.yaml), "
            f"use a new run.dir, or allow the change with run.allow_changes={keys} (recorded "
            f"in its config_history.jsonl)")


@pytest.mark.parametrize("changed, said", [
    (["train.lr=0.0005"], "train.lr from 0.001 to 0.0005"),
    (["run.seed=7"], "run.seed from 0 to 7"),
    (["run.seed=7", "train.lr=0.0005", "train.max_steps=8"],  # max_steps may change: unnamed
     "train.lr from 0.001 to 0.0005, run.seed from 0 to 7"),
], ids=["lr", "seed", "lr+seed"])
def test_a_changed_learning_key_is_refused_and_changes_nothing(run, changed, said):
    before = files(run)
    proc = dba3c("train", *TINY, "train.max_steps=4", f"run.dir={run}", *changed,
                 check=False, timeout=120)
    keys = ",".join(k for k in ("train.lr", "run.seed") if k in said)
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr) == [refusal(run, said, keys)], proc.stderr
    assert "Traceback" not in proc.stderr
    assert files(run) == before


def test_an_allowed_change_continues_and_is_recorded_with_its_step(trained, run):
    dba3c("train", *TINY, f"run.dir={run}", "train.max_steps=6", "train.lr=0.0005",
          "run.allow_changes=train.lr")
    assert latest_checkpoint(run).step == 6
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["train"]["lr"] == 0.0005 and config["train"]["max_steps"] == 6
    [record] = read_jsonl(run / "config_history.jsonl")
    assert record["step"] == 4
    assert record["changes"] == [
        {"key": "train.lr", "old": 0.001, "new": 0.0005, "learning": True},
        {"key": "train.max_steps", "old": 4, "new": 6, "learning": False},
        # the copy of the trained run is a moved run: recorded, allowed
        {"key": "run.dir", "old": str(trained), "new": str(run), "learning": False},
        {"key": "run.allow_changes", "old": "", "new": "train.lr", "learning": False}]
    # config.yaml now says train.lr=0.0005: resuming with it needs nothing more
    dba3c("train", *TINY, f"run.dir={run}", "train.max_steps=8", "train.lr=0.0005")
    assert latest_checkpoint(run).step == 8
    assert [r["step"] for r in read_jsonl(run / "config_history.jsonl")] == [4, 6]


def test_a_changed_time_limit_and_log_cadence_continue(trained, run):
    dba3c("train", *TINY, f"run.dir={run}", "train.max_steps=6", "run.log_every=2")
    assert latest_checkpoint(run).step == 6
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3, 4, 6]
    [record] = read_jsonl(run / "config_history.jsonl")
    assert record["step"] == 4 and record["changes"] == [
        {"key": "train.max_steps", "old": 4, "new": 6, "learning": False},
        {"key": "run.dir", "old": str(trained), "new": str(run), "learning": False},
        {"key": "run.log_every", "old": 1, "new": 2, "learning": False}]


def test_a_run_with_nothing_left_to_train_keeps_its_last_evaluation(tmp_path):
    """The evaluation of the final parameters finishes after the last checkpoint is written;
    starting the finished run again must not put the checkpoint's older summary back."""
    run = tmp_path / "run"
    args = ["configs/cartpole.yaml", "debug.synthetic_data=true", "train.max_steps=4",
            "train.max_seconds=0", "eval.every=2", "eval.episodes=1", "eval.num_envs=1",
            "run.progress=none", f"run.dir={run}"]
    dba3c("train", *args)
    first = yaml.safe_load((run / "summary.json").read_text())
    assert first["last_eval"]["step"] == 4 and first["final_step"] == 4
    proc = dba3c("train", *args)
    assert "nothing to train" in proc.stderr
    again = yaml.safe_load((run / "summary.json").read_text())
    assert again["last_eval"] == first["last_eval"]
    assert again["final_step"] == 4 and again["time_s"] >= first["time_s"]
    assert again["stop_reason"] == "train.max_steps=4 reached"


def test_rank_0_refusing_a_changed_config_ends_the_mpi_job_with_exit_2(tmp_path):
    run = tmp_path / "run"
    common = ["launch", *TINY, "--workers", 1, "--ps", 1, "train.max_steps=4",
              f"run.dir={run}"]
    dba3c(*common, timeout=240)
    before = files(run)
    proc = dba3c(*common, "train.lr=0.002", check=False, timeout=240)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [
        refusal(run, "train.lr from 0.001 to 0.002", "train.lr")], proc.stderr
    assert "Traceback" not in proc.stderr
    assert files(run) == before
