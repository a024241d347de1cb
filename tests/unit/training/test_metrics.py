"""Metrics (dba3c.training.metrics): what a run's ``metrics.jsonl`` lines summarise to, the
closing line's next steps, and Weights & Biases logging (``run.wandb``, on a fake module):
the TensorBoard scalars under the same names, one W&B run per run directory."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

from dba3c.core import Evaluation
from dba3c.preset import load_config
from dba3c.training.chief import Chief
from dba3c.training.metrics import (
    Wandb,
    next_steps,
    run_report,
    scalars,
    sparkline,
    steady_throughput,
)
from dba3c.training.rundir import RunDir
from tests.support import NO_PARAMS, ROOT, read_jsonl


def test_steady_throughput_is_the_mean_of_the_second_half():
    metrics = [{"perf/data_points_per_s": r} for r in (10.0, 20.0, 100.0, 200.0, 300.0)]
    assert steady_throughput(metrics) == pytest.approx((100 + 200 + 300) / 3)
    assert steady_throughput([{"perf/data_points_per_s": 7.0}]) == 7.0
    assert steady_throughput([{"step": 1}]) is None


def test_sparkline_bins_the_values_and_scales_them_between_min_and_max():
    assert sparkline([]) == ""
    assert sparkline([3.0, 3.0]) == "▁▁"  # flat: the lowest bar
    assert sparkline([0.0, 7.0, 3.5]) == "▁█▅"  # 3.5 of 0..7: 3.5 of 7 steps, rounded up
    # 8 values in 4 characters: the means of pairs (0.5, 2.5, 4.5, 6.5) over 0.5..6.5
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7], width=4) == "▁▃▆█"


def test_the_run_report_says_what_the_agent_did(tmp_path):
    run = RunDir(tmp_path)
    rows = [{"step": 10 * k, "time_s": 2.0 * k, "perf/data_points_per_s": 100.0 * k,
             "train/online_score": float(k)} for k in range(1, 5)]
    run.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run.evals_path.write_text(json.dumps({"step": 20, "mean": 1.25, "episodes": 4}) + "\n")
    run.summary_path.write_text(json.dumps({"target_score": 1, "target_step": 20,
                                            "time_to_target_s": 4.0}))
    assert run_report(run) == [
        "trained 40 steps in 8 s, 350 data points/s",  # the mean of the second half
        "score in training games: 1.0 -> 4.0 (max 4.0)  ▁▃▆█",
        "greedy evaluations: step 20: mean 1.2 over 4 games",
        "target 1 reached at step 20 after 4 s"]
    assert run_report(RunDir(tmp_path / "none")) == []


def test_next_steps_names_the_run_directory_and_a_video_only_for_atari():
    assert next_steps("runs/bo", True) == (
        "next: dba3c plot runs/bo --out runs/bo/plots; tensorboard --logdir runs/bo/tb; "
        "dba3c evaluate runs/bo --episodes 10 --video runs/bo/game.mp4")
    assert next_steps("runs/my cp/", False) == (
        "next: dba3c plot 'runs/my cp' --out 'runs/my cp/plots'; tensorboard --logdir "
        "'runs/my cp/tb'; dba3c evaluate 'runs/my cp' --episodes 10")


HAVE_WANDB = importlib.util.find_spec("wandb") is not None
CONFIG, PONG = str(ROOT / "configs" / "breakout.yaml"), ["env.id=pong", "model.kind=a3c_ff"]


class FakeRun:
    def __init__(self, **init):
        self.init, self.metrics, self.logged, self.finished = init, [], [], False

    def define_metric(self, name, step_metric=None):
        self.metrics.append((name, step_metric))

    def log(self, data):
        self.logged.append(data)

    def finish(self):
        self.finished = True


class FakeWandb(types.ModuleType):
    """A stand-in ``wandb`` module that records the runs the chief starts."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
        self.runs: list[FakeRun] = []

    def init(self, **kw) -> FakeRun:
        self.runs.append(FakeRun(**kw))
        return self.runs[-1]


@pytest.fixture
def fake_wandb(monkeypatch):
    """A stand-in ``wandb`` module that records what the chief sends it."""
    module = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def _run_chief(run_dir, *overrides):
    cfg = load_config(CONFIG, [*PONG, f"run.dir={run_dir}",
                               "run.progress=none", "run.log_every=1",
                               "run.wandb=true", *overrides])
    chief = Chief(cfg, None, NO_PARAMS, num_workers=1, hosts=["h0"])
    chief.on_step(1)
    chief.on_step(2)
    chief.on_eval(Evaluation(1, (-20.0, -10.0)))  # an evaluation finishing after step 2 was logged
    chief.close()
    return cfg


def test_wandb_gets_the_tensorboard_scalars_against_the_global_step(tmp_path, fake_wandb):
    cfg = _run_chief(tmp_path / "run", "run.wandb_mode=offline", "run.wandb_project=p")
    (run,) = fake_wandb.runs
    assert run.init["project"] == "p" and run.init["mode"] == "offline"
    assert run.init["dir"] == str((tmp_path / "run").resolve())
    assert run.init["config"] == cfg.to_dict() and run.init["resume"] == "allow"
    assert ("*", "step") in run.metrics  # every metric plotted against the global step
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    evals = read_jsonl(tmp_path / "run" / "eval.jsonl")
    assert run.logged == [
        {"step": 1, **scalars(metrics[0])},
        {"step": 2, **scalars(metrics[1])},
        {"step": 1, "eval/mean_score": -15.0, "eval/max_score": -10.0,
         "eval/hns": evals[0]["hns"]},
    ]
    assert {"perf/data_points_per_s", "time/compute", "train/lr"} <= set(run.logged[0])
    assert run.finished


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path, fake_wandb):
    _run_chief(tmp_path / "a")
    _run_chief(tmp_path / "a")
    _run_chief(tmp_path / "b")
    first, again, other = (run.init["id"] for run in fake_wandb.runs)
    assert first == again != other


@pytest.mark.skipif(not HAVE_WANDB, reason="wandb is not installed (pip install "
                                           "'dba3c[wandb]'); the fake-module tests cover dba3c")
def test_real_wandb_offline_run(tmp_path):
    cfg = load_config(CONFIG, [*PONG, f"run.dir={tmp_path / 'run'}",
                               "run.progress=none", "run.log_every=1",
                               "run.wandb=true", "run.wandb_mode=offline"])
    chief = Chief(cfg, None, NO_PARAMS, num_workers=1, hosts=["h0"])
    chief.on_step(1)
    chief.on_eval(Evaluation(1, (-20.7,)))
    log = chief.scalar_logs[-1]
    assert isinstance(log, Wandb)
    summary = dict(log._run.summary)
    chief.close()
    assert summary["eval/hns"] == 0.0 and summary["step"] == 1
    assert summary["train/lr"] == cfg.train.lr
    (offline,) = Path(tmp_path / "run" / "wandb").glob("offline-run-*")
    assert list(offline.glob("run-*.wandb"))
