"""The chief (dba3c.training.chief): its metrics from worker reports as they arrive over the
wire, the last step logged when a run ends between log steps, and the end of a run for an
evaluator thread (a signal during the last evaluation, eval.at_end=false, its progress
lines, a run too short to be evaluated at the end), and each evaluation's active units, a
dead layer ending the run."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from dba3c.core import Params
from dba3c.distributed.wire import ReportMsg
from dba3c.learning.params import unflatten
from dba3c.preset import from_dict, load_config
from dba3c.training.chief import Chief
from dba3c.training.report import Losses, Seconds, WorkerReport
from tests.support import NO_PARAMS, ROOT, read_jsonl


def wire(report: WorkerReport, final: bool = False) -> WorkerReport:
    """A report as the chief receives it from a remote worker."""
    return ReportMsg.decode(ReportMsg(report, final, 2).encode()).report


def test_a_final_report_without_losses_is_left_out_of_the_loss_means(tmp_path):
    cfg = load_config(str(ROOT / "configs" / "cartpole.yaml"),
                      [f"run.dir={tmp_path}", "run.progress=none", "run.log_every=1"])
    chief = Chief(cfg, None, NO_PARAMS, num_workers=2, hosts=["h0", "h1"])
    counters = WorkerReport(data_points=32, env_frames=32, seconds=Seconds(*[0.1] * 5))
    chief.worker_report(0, wire(replace(counters, policy_lag=1.0,
                                        losses=Losses(policy=0.5, value=2.0))))
    chief.worker_report(2, wire(replace(counters, policy_lag=0.0,
                                        losses=Losses(policy=1.5, value=4.0))))
    chief.on_step(1)
    # rank 2 finished: its last report has counters but no losses (they arrive as None)
    chief.worker_report(2, wire(replace(counters, policy_lag=0.0), final=True))
    chief.on_step(2)
    chief.close()
    first, second = read_jsonl(tmp_path / "metrics.jsonl")
    assert np.isclose(first["loss/policy"], 1.0) and np.isclose(first["loss/value"], 3.0)
    assert np.isclose(second["loss/policy"], 0.5) and np.isclose(second["loss/value"], 2.0)
    assert second["loss/entropy"] is None  # no worker reported it


# ---- the pieces ----------------------------------------------------------------------------
REPORT = WorkerReport()  # no data points, frames or score yet, 0 s in each activity


def make_chief(run_dir: Path):
    """A Chief of a CartPole run logging every 5 steps."""
    from dba3c.learning.models import make_net_spec
    from dba3c.training.chief import Chief

    cfg = from_dict({"env": {"id": "CartPole-v1"}, "model": {"kind": "mlp"},
                     "train": {"max_steps": 100}, "eval": {"every": 0},
                     "run": {"dir": str(run_dir), "log_every": 5, "progress": "none"}})
    return Chief(cfg, None, make_net_spec(cfg.model, (4,), 2).layout(), num_workers=2,
                 hosts=["h0", "h1"])


def test_a_run_ended_between_log_steps_still_logs_its_last_step(tmp_path):
    """A stop that comes between log steps (a signal, the target score) and leaves no further
    step: closing the run logs the step it ended at."""
    chief = make_chief(tmp_path)
    chief.worker_report(0, REPORT)
    for step in range(1, 8):
        chief.on_step(step)
    chief.request_stop("signal SIGTERM")
    chief.close()
    assert [m["step"] for m in read_jsonl(tmp_path / "metrics.jsonl")] == [5, 7]


def test_a_workers_last_report_without_losses_is_logged(tmp_path):
    """A worker's last report comes over STATS with its losses as NaN, read back as None; a
    step logged after it (the final one, typically) averages the losses that were sent. (The
    chief used to fail on it: rank 0 died without the final metrics line.)"""
    from dba3c.distributed.wire import ReportMsg

    chief = make_chief(tmp_path)
    chief.worker_report(0, WorkerReport(policy_lag=1.0, losses=Losses(total=2.0)))
    received = ReportMsg.decode(ReportMsg(REPORT, True, 3).encode())
    last = received.report
    assert received.final and received.rank == 3 and last.losses.total is None
    chief.worker_report(3, last)
    chief.on_step(5)
    chief.close()
    record = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert (record["step"], record["loss/total"], record["perf/policy_lag"]) == (5, 2.0, 1.0)
    assert record["loss/policy"] is None  # sent by no worker


def test_the_summary_names_the_host_of_every_rank(tmp_path):
    from dba3c.training.rundir import RunDir

    chief = make_chief(tmp_path)
    chief.on_step(1)
    chief.close()
    assert RunDir(tmp_path).read_summary()["hosts"] == ["h0", "h1"]


# ---- the evaluation at the end, in this process --------------------------------------------
def chief_and_evaluator(run_dir: Path, *overrides: str):
    """A Chief of a CartPole run and its started evaluator thread, one game at a time."""
    from dba3c.games.evaluation import BackgroundEvaluator
    from dba3c.learning.models import make_net_spec

    cfg = load_config(str(ROOT / "configs" / "cartpole.yaml"),
                      [f"run.dir={run_dir}", "run.progress=none", "eval.num_envs=1",
                       "eval.every=5", *overrides])
    spec = make_net_spec(cfg.model, (4,), 2)
    evaluator = BackgroundEvaluator(cfg, spec, start_step=0)
    evaluator.start()
    return Chief(cfg, None, spec.layout(), num_workers=1, hosts=["h0"]), evaluator, spec


def test_a_signal_during_the_last_evaluation_drops_it_and_says_so(tmp_path, capsys):
    chief, evaluator, spec = chief_and_evaluator(tmp_path, "eval.episodes=100000")
    shown = chief.evaluation_progress

    def signal_comes(games: int, frames: int) -> None:  # as SIGTERM's handler would
        shown(games, frames)
        chief.signal = "SIGTERM"

    chief.evaluation_progress = signal_comes
    chief.finish_evaluations(evaluator, Params(7, spec.init_params(0)))
    chief.close()
    waiting, dropped = capsys.readouterr().err.splitlines()
    cap = chief.cfg.eval.max_frames
    assert re.fullmatch(rf"waiting for the evaluation at the end of the run: 0 of 100000 "
                        rf"games over, [0-9,]+ frames played \(at most {100000 * cap:,}: "
                        rf"eval.max_frames={cap:,} a game\), 0 s", waiting), waiting
    assert dropped == "the evaluation of step 7 in progress was dropped (stopped by signal SIGTERM)"
    assert read_jsonl(tmp_path / "eval.jsonl") == [] and not evaluator.is_alive()


def test_the_wait_for_the_last_evaluation_counts_frames_and_bounds_the_time_left(
        tmp_path, capsys):
    chief = Chief(load_config(str(ROOT / "configs" / "cartpole.yaml"),
                              [f"run.dir={tmp_path}", "run.progress=none", "eval.episodes=4",
                               "eval.max_frames=500"]), None, NO_PARAMS, 1, ["h0"])
    clock = iter([100.0, 112.0, 113.0, 130.0, 142.0])
    with mock.patch("dba3c.training.chief.time.monotonic", lambda: next(clock)):
        chief.evaluation_progress(0, 0)  # at 100 s: shown, no rate yet
        chief.evaluation_progress(1, 600)  # at 112 s: 600 of 2000 frames in 12 s
        chief.evaluation_progress(2, 700)  # at 113 s: within 10 s of the last line
        # the final evaluation after the one in progress: its own clock from 130 s
        chief.evaluation_progress(0, 100)
        chief.evaluation_progress(0, 1000)  # at 142 s: 900 more frames in 12 s
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "waiting for the evaluation at the end of the run: 0 of 4 games over, 0 frames "
        "played (at most 2,000: eval.max_frames=500 a game), 0 s",
        "waiting for the evaluation at the end of the run: 1 of 4 games over, 600 frames "
        "played (at most 2,000: eval.max_frames=500 a game), 12 s, at most 28 s left",
        "waiting for the evaluation at the end of the run: 0 of 4 games over, 100 frames "
        "played (at most 2,000: eval.max_frames=500 a game), 0 s",
        "waiting for the evaluation at the end of the run: 0 of 4 games over, 1,000 frames "
        "played (at most 2,000: eval.max_frames=500 a game), 12 s, at most 12 s left"]


def test_a_run_shorter_than_eval_every_says_it_was_not_evaluated_at_the_end(tmp_path, capsys):
    cfg = load_config(str(ROOT / "configs" / "cartpole.yaml"),
                      [f"run.dir={tmp_path}", "run.progress=none", "eval.every=10"])
    for step, said in ((3, True), (10, False)):
        with Chief(cfg, None, NO_PARAMS, 1, ["h0"]) as chief:
            chief.on_step(step)
        err = capsys.readouterr().err
        assert ("no evaluation at the end: the run ended at step 3, before eval.every=10 "
                "(give a smaller eval.every to evaluate a short run)" in err) == said, err


def test_without_eval_at_end_the_evaluation_in_progress_is_dropped(tmp_path, capsys):
    chief, evaluator, spec = chief_and_evaluator(tmp_path, "eval.episodes=100000",
                                                 "eval.at_end=false")
    assert evaluator.after_step(5, spec.init_params(0)) == []  # due: asked for
    chief.finish_evaluations(evaluator, Params(7, spec.init_params(0)))
    chief.close()
    assert capsys.readouterr().err == (
        "the evaluation of step 5 in progress was dropped (eval.at_end=false)\n")
    assert read_jsonl(tmp_path / "eval.jsonl") == [] and not evaluator.is_alive()


# ---- active units ------------------------------------------------------------------------
def hand_set(spec, alive: dict[str, int]) -> np.ndarray:
    """Parameters with zero kernels: each hidden layer's output is relu(its bias) whatever
    the input, so its active units are the biases set to 1 (the first ``alive[layer]``),
    the others -1."""
    theta = np.zeros(spec.layout().num_params, np.float32)
    tensors = dict(zip(spec.layout().names, unflatten(spec.layout(), theta)))
    for layer, n in alive.items():
        tensors[f"{layer}/bias"][:] = -1.0
        tensors[f"{layer}/bias"][:n] = 1.0
    return theta


@pytest.mark.parametrize("stop_if_dead", [True, False])
def test_each_evaluation_counts_active_units_and_a_dead_layer_ends_the_run(
        tmp_path, capsys, stop_if_dead):
    chief, evaluator, spec = chief_and_evaluator(
        tmp_path, "eval.episodes=1", "eval.probe_frames=50", f"eval.stop_if_dead={stop_if_dead}")
    for step, alive in ((5, {"fc0": 9, "fc1": 3}), (10, {"fc0": 0, "fc1": 3}),
                        (15, {"fc0": 0, "fc1": 0})):
        evaluator.submit(step, hand_set(spec, alive))
        while evaluator.in_progress() is not None or evaluator.finished < step:
            for evaluation in evaluator.results():
                chief.on_eval(evaluation)
        for evaluation in evaluator.results():
            chief.on_eval(evaluation)
    evaluator.stop()
    chief.close()
    assert [(r["step"], r["active_units"]) for r in read_jsonl(tmp_path / "eval.jsonl")] == [
        (5, {"fc0": 9, "fc1": 3}), (10, {"fc0": 0, "fc1": 3}), (15, {"fc0": 0, "fc1": 0})]
    said = ("step 10: the network is dead: layer fc0 has no active unit on 50 frames of random "
            "play (eval.probe_frames), so its output no longer depends on the observation and no "
            "gradient reaches the layers below it; ")
    said += ("the run stops (eval.stop_if_dead=false trains on)" if stop_if_dead
             else "training goes on (eval.stop_if_dead=false)")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == said  # once: step 15's dead layers are only recorded
    # a stopping run says each evaluation it ends with
    assert len(lines) == 1 + 2 * stop_if_dead
    assert [line.split(":")[0] for line in lines[1:]] == (
        ["evaluation of step 10", "evaluation of step 15"] if stop_if_dead else [])
    assert chief.stop_reason == ("eval.stop_if_dead: layer fc0 dead at step 10" if stop_if_dead
                                 else None)
