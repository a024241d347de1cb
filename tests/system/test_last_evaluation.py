"""The evaluation at the end of a run, through the real command line: a run that ends
(``train.max_steps``) evaluates its final parameters, waits for it, and records it in
eval.jsonl and summary.json (and the time to the target, when it reaches it), in one process
(a short Pong run, with every layer's active units) and with collective aggregation; a
signal drops the evaluation in progress and says so, and the run still stops at once. (With
parameter servers: test_sweep's runs; an evaluator rank: test_collective_mpi and
tests/unit/distributed/test_evaluator.py.)"""

from __future__ import annotations

import json
import signal

import pytest

from dba3c.games.scores import score_stats
from tests.support import dba3c, read_jsonl
from tests.support.jobs import Job, stop_with_signal, summary, wait_for_steps

QUIET = ["run.progress=none", "train.max_seconds=0", "run.checkpoint_every=0"]


def assert_final_evaluation_recorded(run, final_step: int, stderr: str) -> None:
    """eval.jsonl ends with the evaluation of ``final_step``; summary.json's last_eval is
    that record's, and the run said it waited for it and what it scored."""
    evals = read_jsonl(run / "eval.jsonl")
    last = evals[-1]
    assert last["step"] == final_step == summary(run)["final_step"]
    assert summary(run)["last_eval"] == {"step": final_step, "mean": last["mean"],
                                         "episodes": last["episodes"], "greedy": True,
                                         **({"hns": last["hns"]} if "hns" in last else {})}
    assert "waiting for the evaluation at the end of the run: " in stderr
    assert f"evaluation of step {final_step}: mean score {last['mean']:g} over " \
           f"{last['episodes']} games" in stderr


@pytest.mark.slow
def test_a_short_pong_run_evaluates_its_final_parameters(tmp_path):
    """40 steps with an evaluation every 20 (the evaluation of step 20 may still run when
    the run ends: it is waited for too). One game, cut at 2000 frames, per evaluation."""
    run = tmp_path / "run"
    proc = dba3c("train", "configs/pong_small.yaml", "train.max_steps=40", "eval.every=20",
                 "eval.episodes=1", "eval.num_envs=1", "eval.max_frames=2000",
                 "env.num_envs=8", "env.batch_size=8", "train.batch_size=32", *QUIET,
                 f"run.dir={run}", timeout=240)
    evals = read_jsonl(run / "eval.jsonl")
    assert [e["step"] for e in evals] == [20, 40]
    assert_final_evaluation_recorded(run, 40, proc.stderr)
    last = evals[-1]
    # the record's statistics and human-normalized score, computed again from its score
    assert last["episodes"] == 1 and last["min"] == last["max"] == last["mean"]
    assert last["hns"] == pytest.approx(score_stats("pong", [last["mean"]])["hns"])
    assert summary(run)["hns"] == last["hns"]
    # each evaluation counted every layer's active units on eval.probe_frames of random play:
    # the final one those `dba3c units` counts on the run's last checkpoint (the same
    # parameters, the same 800 frames of seed run.seed)
    units = json.loads(dba3c("units", run, "--frames", "800", "--seed", "0").stdout)
    assert units["checkpoint_step"] == 40
    assert last["active_units"] == {layer["layer"]: layer["active"] for layer in units["layers"]}
    assert all(list(e["active_units"]) == ["conv0", "conv1", "fc2"] for e in evals)


@pytest.mark.slow
def test_a_collective_run_evaluates_its_final_parameters_in_the_chief(tmp_path):
    """Its last evaluation is the final one (the one of step 20 may have been overtaken:
    the newest snapshot wins), and reaches the (zero) target: the time to the target is
    recorded as for any evaluation."""
    run = tmp_path / "run"
    proc = dba3c("launch", "configs/cartpole.yaml", "--workers", 2,
                 "dist.aggregation=collective", "dist.ps=0", "train.max_steps=25",
                 "eval.every=20", "eval.episodes=3", "eval.target_score=0",
                 "eval.stop_at_target=false", *QUIET,
                 f"run.dir={run}", timeout=300)
    evals = read_jsonl(run / "eval.jsonl")
    assert [e["step"] for e in evals] in ([20, 25], [25])
    assert_final_evaluation_recorded(run, 25, proc.stderr)
    done = summary(run)
    assert done["target_step"] == evals[0]["step"]
    assert done["time_to_target_s"] == evals[0]["time_s"]


def test_a_run_shorter_than_eval_every_ends_without_an_evaluation_and_says_so(tmp_path):
    """A smoke run of 3 steps on a preset that evaluates every 1000 ends at once: no game of
    its untrained agent is played."""
    run = tmp_path / "run"
    proc = dba3c("train", "configs/cartpole.yaml", "train.max_steps=3", "eval.every=1000",
                 *QUIET, f"run.dir={run}", timeout=120)
    assert read_jsonl(run / "eval.jsonl") == [] and "last_eval" not in summary(run)
    assert "no evaluation at the end: the run ended at step 3, before eval.every=1000" \
        in proc.stderr
    assert "waiting for the evaluation" not in proc.stderr


@pytest.mark.slow
def test_a_signal_drops_the_evaluation_in_progress_and_says_so(tmp_path):
    """An evaluation of 5000 CartPole games, asked for every 5 steps, is always in progress:
    SIGTERM stops the run within 10 s all the same, with a line naming it."""
    run = tmp_path / "run"
    with Job("train", "configs/cartpole.yaml", "train.max_steps=1000000", "eval.every=5",
             "eval.episodes=5000", "run.log_every=1", *QUIET, f"run.dir={run}") as job:
        wait_for_steps(run, job, 10)
        assert stop_with_signal(job, job.proc.pid, signal.SIGTERM, timeout=10) == 0
    step = summary(run)["final_step"]
    dropped = [line for line in job.output.splitlines() if "in progress was dropped" in line]
    assert len(dropped) == 1 and dropped[0].startswith("the evaluation of step ")
    assert dropped[0].endswith(" in progress was dropped (stopped by signal SIGTERM)")
    assert 5 <= int(dropped[0].split()[4]) <= step
    assert read_jsonl(run / "eval.jsonl") == []
    assert "last_eval" not in json.loads((run / "summary.json").read_text())
