"""Section timing of a worker's loops (dba3c.training.profiling), on a hand-driven clock."""

import pytest

from dba3c.training import profiling
from dba3c.training.profiling import Laps, section_table


def test_laps_give_each_section_the_time_since_the_previous_lap(monkeypatch):
    clock = iter([10.0, 10.5, 10.75, 12.0, 12.25, 13.0])
    monkeypatch.setattr(profiling.time, "perf_counter", lambda: next(clock))
    laps = Laps()  # 10.0
    laps.lap("predict")  # 10.5: 0.5
    laps.lap("recv")  # 10.75: 0.25
    laps.start()  # 12.0: a pause between is not counted
    laps.lap("predict")  # 12.25: 0.25
    laps.lap("recv")  # 13.0: 0.75
    assert laps.snapshot() == {"predict": (0.75, 2), "recv": (1.0, 2)}


def test_section_table_takes_the_window_between_snapshots_per_iteration():
    before = {"gradient": (1.0, 10), "push": (0.5, 10)}
    after = {"gradient": (4.0, 40), "push": (1.1, 40), "assign": (0.3, 30)}
    # 30 steps in a 4 s window: gradient 3 s, push 0.6 s, assign 0.3 s, 0.1 s unmeasured
    rows = section_table(before, after, 4.0, "gradient")
    expected = [("gradient", 100.0, 0.75), ("push", 20.0, 0.15), ("assign", 10.0, 0.075),
                ("unaccounted", 1000 * 0.1 / 30, 0.025)]
    assert [name for name, _, _ in rows] == [name for name, _, _ in expected]
    for (_, ms, share), (_, ms_ref, share_ref) in zip(rows, expected):
        assert ms == pytest.approx(ms_ref)
        assert share == pytest.approx(share_ref)
