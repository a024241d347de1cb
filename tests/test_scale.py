"""``dba3c bench --scale``: the grid, the arithmetic of its measurements, and real
(small) synthetic runs whose step time must follow the compute time and the stragglers."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from launch.scale import (
    ScalePoint,
    busy_fraction,
    cpu_times,
    peak_by_role,
    run_point,
    scale_grid,
    scale_table,
    steady_step_seconds,
)

from conftest import dba3c


def test_grids_cover_the_issue_points_once():
    full = scale_grid(quick=False)
    assert len(full) == len(set(full))
    assert {(p.workers, p.ps) for p in full if p.hidden == 128 and not p.replicas
            and not p.slow_workers} >= {(w, p) for w in (1, 2, 4, 8, 16, 32, 64)
                                        for p in (1, 2, 4, 8)}
    assert {p.hidden for p in full if (p.workers, p.ps) == (64, 4)} == {32, 128, 256, 512}
    assert {p.ps for p in full if p.workers == 64 and p.hidden == 128} == set(range(1, 9))
    backups = [(p.replicas, p.slow_workers) for p in full if p.replicas]
    assert backups == [(60, 0), (60, 4)]
    quick = scale_grid(quick=True)
    assert max(p.workers for p in quick) == 16 and len(quick) == 11


def test_steady_step_time_is_the_slope_after_the_warmup():
    metrics = [{"step": s, "time_s": t} for s, t in
               [(1, 5.0), (2, 5.5), (3, 5.6), (4, 5.8), (5, 6.0), (6, 6.2)]]
    assert steady_step_seconds(metrics, warmup=2) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="need at least 2"):
        steady_step_seconds(metrics, warmup=5)


def test_cpu_use_counts_idle_and_iowait_as_not_busy():
    assert cpu_times("cpu  10 2 8 70 10 0 0 0 0 0") == (20, 100)
    samples = [(3, 100, 1000), (6, 150, 1100), (9, 250, 1300), (12, 300, 1400)]
    assert busy_fraction(samples, warmup=5) == pytest.approx(150 / 300)
    assert busy_fraction(samples[:2], warmup=5) is None


def test_peak_rss_is_grouped_by_role():
    peaks = {"process": 500.0, "rank0": 110.0, "rank1": 90.0, "rank2": 95.0, "rank3": 80.0,
             "rank4": 85.0}
    assert peak_by_role(peaks, num_ps=2) == {"chief": 110.0, "ps": 95.0, "worker": 85.0}


def test_table_lists_every_point_with_its_settings():
    point = {"workers": 16, "ps": 4, "hidden": 128, "replicas": 15, "slow_workers": 1,
             "slow_factor": 2.0, "step_ms": 20.5, "efficiency": 0.65,
             "data_points_per_s": 23414.6, "cpu_busy": 0.4,
             "peak_rss_mb": {"chief": 110.2, "ps": 95.0, "worker": 90.0}}
    r = {"quick": True, "date": "2026-11-23", "machine": "test CPU", "config": "c.yaml",
         "overrides": [], "compute_ms": 12.8, "compute_ms_source": "assumed", "time_scale": 10,
         "warmup_steps": 5, "steps": 15, "links": "shared memory", "points": [point]}
    table = scale_table(r, "dba3c bench --scale --quick")
    assert "| 16 | 4 | 128 | 15/16 | 1 x2 | 20.5 | 0.65 | 23415 | 40% | 110 |" in table
    assert "T_c = 12.8 ms (assumed)" in table


@pytest.mark.parametrize("point, floor", [(ScalePoint(2, 1), 1.0),
                                          (ScalePoint(2, 1, slow_workers=1, slow_factor=3.0),
                                           3.0)])
def test_a_small_run_steps_no_faster_than_its_slowest_worker(point, floor):
    # T_c 20 ms x s 5 = 100 ms per step (300 ms for a straggler, whom every step waits for)
    r = run_point("configs/breakout.yaml", [], point, compute_ms=20.0, time_scale=5.0,
                  steps=8, warmup=3)
    assert floor * 20.0 <= r["step_ms"] < floor * 20.0 + 40.0, r
    assert r["efficiency"] == pytest.approx(20.0 / r["step_ms"])
    assert r["data_points_per_s"] == pytest.approx(2 * 32 / (r["step_ms"] / 1000))
    assert r["cpu_busy"] is None or 0.0 <= r["cpu_busy"] <= 1.0
    assert set(r["peak_rss_mb"]) == {"chief", "ps", "worker"}
    assert all(20 < mb <= 150 for mb in r["peak_rss_mb"].values()), r["peak_rss_mb"]


def test_bad_scale_options_are_refused():
    for args, expected in [(["--scale", "--long", "5"], "--scale and --long"),
                           (["--scale", "--compute-ms", "0"], "--compute-ms 0 must be"),
                           (["--scale", "--time-scale", "0.5"], "--time-scale 0.5 must be")]:
        proc = dba3c("bench", *args, check=False, timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and \
            expected in proc.stderr, proc.stderr


def test_scale_command_writes_every_point_to_json_and_appends_the_table(tmp_path, monkeypatch):
    from launch import scale

    def measured(config, overrides, point, *, compute_ms, time_scale, steps, warmup):
        # what a run would return: here a step of T_c + 1 ms per worker
        step_ms = compute_ms + point.workers
        return {**asdict(point), "step_ms": step_ms, "efficiency": compute_ms / step_ms,
                "data_points_per_s": 1000.0, "cpu_busy": 0.5, "peak_rss_mb": {"chief": 100.0}}

    monkeypatch.setattr(scale, "run_point", measured)
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n")
    table = scale.scale_command("configs/breakout.yaml", [], True, None, 10.0,
                                tmp_path / "scale.json", docs)
    results = json.loads((tmp_path / "scale.json").read_text())
    assert [(p["workers"], p["ps"]) for p in results["points"]][:6] == [
        (1, 1), (1, 4), (4, 1), (4, 4), (16, 1), (16, 4)]
    assert results["compute_ms"] == pytest.approx(77 * 2 / 12) and results["time_scale"] == 10
    assert "assumed" in results["compute_ms_source"]
    assert docs.read_text() == "# Benchmarks\n\n" + table
    assert "Command: `dba3c bench --scale --quick --time-scale 10`" in table
    assert table.count("\n| 16 | 4 |") == 6  # 16 x 4 at FC 128, 32, 512, and 3 backup rows
