"""The overlap-cost bench's arithmetic on hand-made metrics, and how dba3c bench scale finds
the cost it charges: the record this machine wrote, the command line, or the default."""

from __future__ import annotations

import pytest

from dba3c.benchmarks.overlap_cost import (
    DEFAULT_SOURCE,
    charged_overlap_cost,
    phase_seconds,
    read_overlap_cost,
    staged_cost,
    staging_source,
)
from dba3c.benchmarks.record import write_results
from dba3c.distributed.collective.staged import probe_mode


def metrics_of(step_s: dict[str, float], probe: int, steps: int) -> list[dict]:
    """A run's chief records when each step's mode (probes back to back) takes ``step_s[mode]``
    seconds, the first step of every phase 1 s more (it traced a graph)."""
    records, now = [], 5.0
    for step in range(1, steps + 1):
        mode = probe_mode(step, probe, 2 * probe)
        first = probe_mode(step - 1, probe, 2 * probe) != mode if step > 1 else True
        now += step_s[mode] + (1.0 if first else 0.0)
        records.append({"step": step, "time_s": now})
    return records


def test_each_probe_times_both_modes_without_their_first_steps():
    metrics = metrics_of({"serial": 0.100, "overlapped": 0.125}, probe=4, steps=20)
    probes = phase_seconds(metrics, 4)
    # 20 steps: two whole probes (1-8, 9-16), the third (17-20) has no overlapped phase
    assert probes == [pytest.approx((0.100, 0.125))] * 2
    assert staged_cost(probes) == pytest.approx(0.25)


def test_the_cost_is_the_median_of_the_probes_ratios():
    assert staged_cost([(0.1, 0.11), (0.1, 0.2), (0.2, 0.2)]) == pytest.approx(0.1)


def test_a_probe_with_a_record_missing_is_left_out():
    metrics = [m for m in metrics_of({"serial": 0.1, "overlapped": 0.1}, 3, 12)
               if m["step"] != 6]  # the first probe's last overlapped step
    assert phase_seconds(metrics, 3) == [pytest.approx((0.1, 0.1))]


def test_scale_charges_what_this_machine_measured_else_the_config(tmp_path):
    record = tmp_path / "overlap_cost.json"
    # nothing measured here: the config's value, from another machine
    assert read_overlap_cost(record) is None
    assert charged_overlap_cost(["hidden=128"], 0.14, record) == (
        ["hidden=128"], {"value": 0.14, "source": DEFAULT_SOURCE})
    write_results({"overlap_cost": 0.0213, "machine": "Xeon, 2 cores", "date": "2026-11-28",
                   "command": "dba3c bench overlap-cost"}, record)
    overrides, staging = charged_overlap_cost(["hidden=128"], 0.14, record)
    assert overrides == ["hidden=128", "dist.overlap_cost=0.0213"]
    assert staging == {"value": 0.0213, "source": str(record), "measured": 0.0213,
                       "machine": "Xeon, 2 cores", "date": "2026-11-28",
                       "command": "dba3c bench overlap-cost"}
    # the command line wins over the record
    assert charged_overlap_cost(["dist.overlap_cost=0"], 0.0, record) == (
        ["dist.overlap_cost=0"], {"value": 0.0, "source": "dist.overlap_cost on the command "
                                                          "line"})
    # overlapped steps measured faster than serial ones: staging charged as free
    write_results({"overlap_cost": -0.01, "machine": "m", "date": "d", "command": "c"},
                  record)
    overrides, staging = charged_overlap_cost([], 0.14, record)
    assert overrides == ["dist.overlap_cost=0.0000"]
    assert (staging["value"], staging["measured"]) == (0.0, -0.01)


def test_a_scale_page_says_which_machine_measured_the_staging_it_charged():
    assert staging_source({"value": 0.02, "source": "bench/overlap_cost.json",
                           "machine": "Xeon, 2 cores", "date": "2026-11-28"}) == (
        "measured by dba3c bench overlap-cost on Xeon, 2 cores, 2026-11-28")
    assert staging_source({"value": 0.14, "source": DEFAULT_SOURCE}) == DEFAULT_SOURCE
