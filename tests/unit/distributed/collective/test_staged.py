"""When the overlapped collective step pays (dba3c.distributed.collective.staged.overlap_pays),
on hand-computed step times."""

from __future__ import annotations

from dba3c.distributed.collective.staged import overlap_pays


def test_overlap_pays_when_the_wait_exceeds_what_staging_costs():
    # 20 ms of compute at cost 0.14: staging costs 2.8 ms a step
    pays, why = overlap_pays(0.0031, 0.020, 0.14)
    assert pays
    assert why == ("collective overlap on: a serial step waited 3.1 ms for its collectives, "
                   "more than overlapping costs (0.14 x 20.0 ms of compute = 2.8 ms)")
    pays, why = overlap_pays(0.0025, 0.020, 0.14)
    assert not pays and why.startswith("collective overlap off:")
    assert "no more than overlapping costs" in why
    assert overlap_pays(0.0001, 0.020, 0.0)[0]  # free staging: any wait pays
    assert not overlap_pays(0.0028, 0.020, 0.14)[0]  # equal: nothing gained
