"""The waiting benchmark's arithmetic: a link's share kept busy by a step's collectives, and
the table that shows it beside the step times."""

from __future__ import annotations

import pytest

from dba3c.benchmarks.waiting import link_share, waiting_table


def test_the_link_share_is_the_steps_wire_bytes_over_what_the_link_carries_meanwhile():
    # 8 ranks, 1000 float32: each sends 2 x 7/8 x 4000 payload bytes, 1514 wire bytes per
    # 1448 of payload; an 8 Mbit/s link carries 1e6 bytes/s
    wire = 2 * 7 / 8 * 4000 * 1514 / 1448  # 7319.06 bytes
    assert link_share(8, 1000, 1000 * wire / 1e6, 8) == pytest.approx(1.0)
    assert link_share(8, 1000, 2000 * wire / 1e6, 8) == pytest.approx(0.5)
    assert link_share(2, 1000, 1000 * wire / 1e6, 8) == pytest.approx(4 / 7)  # 2 x 1/2


def test_the_table_shows_link_shares_only_when_every_point_has_one():
    points = [{"ranks": 8, "strategy": "block", "step_ms": 10.0, "wait_cpu": 0.95, "load": 2,
               "link_share": 0.71},
              {"ranks": 8, "strategy": "poll-80us", "step_ms": 12.5, "wait_cpu": 0.1,
               "load": 3, "link_share": 0.568}]
    lines = waiting_table(points).splitlines()
    assert lines[0] == ("| ranks | step ms, block | step ms, poll-80us | link share, block | "
                        "link share, poll-80us | waiting CPU, block | waiting CPU, poll-80us "
                        "| load |")
    assert lines[1] == "|---|" + "---|" * 7
    assert lines[2] == "| 8 | 10.00 | 12.50 | 0.71 | 0.57 | 0.95 | 0.10 | 2 / 3 |"
    del points[1]["link_share"]
    assert waiting_table(points).splitlines()[2] == "| 8 | 10.00 | 12.50 | 0.95 | 0.10 | 2 / 3 |"
