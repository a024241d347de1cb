"""``dba3c sweep``'s results read from run dirs (dba3c.launchers.sweep)."""

from __future__ import annotations

import json

import pytest

from dba3c.errors import UserError
from dba3c.launchers.slurm_site import SlurmSite
from dba3c.launchers.sweep import SlurmRequest, point_result, run_sweep
from tests.support import ROOT


def test_point_result_reads_summary_eval_and_metrics(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"time_to_target_s": 12.5}))
    (tmp_path / "eval.jsonl").write_text('{"mean": 3.0}\n{"mean": 9.5}\n')
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"perf/data_points_per_s": r}) + "\n" for r in (1.0, 4.0, 6.0)))
    assert point_result(tmp_path, 0) == {"data_points_per_s": 5.0, "time_to_target_s": 12.5,
                                         "final_eval_mean": 9.5, "status": "ok"}
    assert point_result(tmp_path, 1)["status"] == "failed (exit 1)"
    assert point_result(tmp_path / "missing", 0)["status"] == "failed (exit 0)"


def test_a_slurm_sweep_refuses_a_point_its_nodes_cannot_hold_before_any_job(tmp_path):
    # CartPole with 1 PS: a point of 3 workers is 4 ranks, of 2 workers 3 ranks; nodes of 2
    # tasks hold the first, not the second
    with pytest.raises(UserError, match="3 ranks do not fill nodes of 2 tasks"):
        run_sweep(str(ROOT / "configs/cartpole.yaml"), ["dist.workers=3,2"], ["dist.ps=1"],
                  sweep_dir=str(tmp_path / "sweep"), launcher="slurm", workers=None,
                  max_seconds=None, slurm=SlurmRequest(2, None, None, SlurmSite()))
    assert not (tmp_path / "sweep").exists()
