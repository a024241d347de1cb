"""``dba3c bench precision``'s arithmetic: speed-ups as ratios of medians and within each
pair of runs, and the page that shows them, against values computed by hand."""

from __future__ import annotations

import pytest

from dba3c.benchmarks.precision import MEASURES, precision_table, speedups


def run(scale: float, mfu: float = 0.5) -> dict:
    """One precision's measures, each ``scale`` times a base value."""
    return {"predict_states_per_s": 1000 * scale, "train_samples_per_s": 400 * scale,
            "matmul_flops_per_s": 1e11 * scale, "data_points_per_s": 200 * scale, "mfu": mfu}


def test_speedups_are_ratios_of_medians_and_of_each_pair():
    runs = {"float32": [run(1.0), run(1.2), run(0.8)],
            "bfloat16": [run(2.0), run(2.0), run(2.4)]}
    result = speedups(runs)
    assert set(result) == set(MEASURES)
    assert result["data_points_per_s"]["median"] == pytest.approx(2.0)  # 400 / 200
    assert result["data_points_per_s"]["pairs"] == pytest.approx([2.0, 2.0 / 1.2, 3.0])
    assert result["matmul_flops_per_s"]["median"] == pytest.approx(2.0)


def test_the_page_shows_each_measure_its_medians_and_speedups():
    runs = {"float32": [run(1.0, mfu=0.25)], "bfloat16": [run(1.9, mfu=0.1)]}
    results = {"quick": True, "date": "2026-11-28", "machine": "a CPU", "config": "c.yaml",
               "overrides": [], "native_bfloat16": True, "runs": runs,
               "speedups": speedups(runs)}
    page = precision_table(results, "dba3c bench precision --quick")
    assert "native bfloat16: yes" in page
    assert "| end to end, one process, data points/s | 200 | 380 | **1.90** (1.90) |" in page
    assert "| matmul peak, GFLOP/s | 100 | 190 | **1.90** (1.90) |" in page
    assert "| MFU against the precision's own peak | 0.25 | 0.10 | |" in page
