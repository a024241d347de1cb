"""The chief (dba3c.training.chief): its metrics from worker reports as they arrive over the
wire, the last step logged when a run ends between log steps, and the end of a run for an
evaluator thread (a signal during the last evaluation, eval.at_end=false)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dba3c.core import Params
from dba3c.distributed.wire import ReportMsg
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

    def signal_comes(games: int) -> None:  # as SIGTERM's handler would, while it waits
        shown(games)
        chief.signal = "SIGTERM"

    chief.evaluation_progress = signal_comes
    chief.finish_evaluations(evaluator, Params(7, spec.init_params(0)))
    chief.close()
    assert capsys.readouterr().err == (
        "waiting for the evaluation at the end of the run: 0 of 100000 games played\n"
        "the evaluation of step 7 in progress was dropped (stopped by signal SIGTERM)\n")
    assert read_jsonl(tmp_path / "eval.jsonl") == [] and not evaluator.is_alive()


def test_without_eval_at_end_the_evaluation_in_progress_is_dropped(tmp_path, capsys):
    chief, evaluator, spec = chief_and_evaluator(tmp_path, "eval.episodes=100000",
                                                 "eval.at_end=false")
    assert evaluator.after_step(5, spec.init_params(0)) == []  # due: asked for
    chief.finish_evaluations(evaluator, Params(7, spec.init_params(0)))
    chief.close()
    assert capsys.readouterr().err == (
        "the evaluation of step 5 in progress was dropped (eval.at_end=false)\n")
    assert read_jsonl(tmp_path / "eval.jsonl") == [] and not evaluator.is_alive()
