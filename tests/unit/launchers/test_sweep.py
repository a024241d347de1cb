"""``dba3c sweep``'s results read from run dirs (dba3c.launchers.sweep)."""

from __future__ import annotations

import json

from dba3c.launchers.sweep import point_result


def test_point_result_reads_summary_eval_and_metrics(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"time_to_target_s": 12.5}))
    (tmp_path / "eval.jsonl").write_text('{"mean": 3.0}\n{"mean": 9.5}\n')
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"perf/data_points_per_s": r}) + "\n" for r in (1.0, 4.0, 6.0)))
    assert point_result(tmp_path, 0) == {"data_points_per_s": 5.0, "time_to_target_s": 12.5,
                                         "final_eval_mean": 9.5, "status": "ok"}
    assert point_result(tmp_path, 1)["status"] == "failed (exit 1)"
    assert point_result(tmp_path / "missing", 0)["status"] == "failed (exit 0)"
