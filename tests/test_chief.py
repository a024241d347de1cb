"""The chief's metrics from worker reports as they arrive over the wire."""

from __future__ import annotations

import numpy as np

from dba3c.distributed.wire import ReportMsg
from dba3c.preset import load_config
from dba3c.training.chief import Chief
from dba3c.training.report import Losses, Seconds, WorkerReport

from conftest import ROOT, read_jsonl


def wire(report: WorkerReport, final: bool = False) -> WorkerReport:
    """A report as the chief receives it from a remote worker."""
    return ReportMsg.decode(ReportMsg(report, final, 2).encode()).report


def test_a_final_report_without_losses_is_left_out_of_the_loss_means(tmp_path):
    cfg = load_config(str(ROOT / "configs" / "cartpole.yaml"),
                      [f"run.dir={tmp_path}", "run.progress=none", "run.log_every=1"])
    chief = Chief(cfg, None, None, num_workers=2)
    counters = {"data_points": 32, "env_frames": 32, "seconds": Seconds(*[0.1] * 5)}
    chief.worker_report(0, wire(WorkerReport(**counters, policy_lag=1.0,
                                             losses=Losses(policy=0.5, value=2.0))))
    chief.worker_report(2, wire(WorkerReport(**counters, policy_lag=0.0,
                                             losses=Losses(policy=1.5, value=4.0))))
    chief.on_step(1)
    # rank 2 finished: its last report has counters but no losses (they arrive as None)
    chief.worker_report(2, wire(WorkerReport(**counters, policy_lag=0.0), final=True))
    chief.on_step(2)
    chief.close()
    first, second = read_jsonl(tmp_path / "metrics.jsonl")
    assert np.isclose(first["loss/policy"], 1.0) and np.isclose(first["loss/value"], 3.0)
    assert np.isclose(second["loss/policy"], 0.5) and np.isclose(second["loss/value"], 2.0)
    assert second["loss/entropy"] is None  # no worker reported it
