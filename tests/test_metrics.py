"""Metrics records: what a run's ``metrics.jsonl`` lines summarise to."""

from __future__ import annotations

import pytest

from dba3c.training.metrics import steady_throughput


def test_steady_throughput_is_the_mean_of_the_second_half():
    metrics = [{"perf/data_points_per_s": r} for r in (10.0, 20.0, 100.0, 200.0, 300.0)]
    assert steady_throughput(metrics) == pytest.approx((100 + 200 + 300) / 3)
    assert steady_throughput([{"perf/data_points_per_s": 7.0}]) == 7.0
    assert steady_throughput([{"step": 1}]) is None
