"""When the overlapped collective step pays (dba3c.distributed.collective.staged.overlap_pays),
on hand-computed step times of several ranks."""

from __future__ import annotations

import numpy as np

from dba3c.distributed.collective.staged import overlap_pays


def test_overlap_pays_when_the_slowest_ranks_wait_exceeds_what_staging_costs():
    # rank 1 is the slowest (it waits least: 3.1 ms); the others also waited for it. At cost
    # 0.14, its 20 ms of compute make staging cost 2.8 ms a step
    wait = np.array([0.015, 0.0031, 0.012])
    compute = np.array([0.008, 0.020, 0.011])
    pays, why = overlap_pays(wait, compute, 0.14)
    assert pays
    assert why == ("collective overlap on: the slowest rank's serial step waited 3.1 ms for "
                   "its collectives, more than overlapping costs (0.14 x 20.0 ms of compute "
                   "= 2.8 ms)")
    # the faster ranks' long waits are rank 1's slowness, which overlap cannot hide
    pays, why = overlap_pays(np.array([0.015, 0.0025, 0.012]), compute, 0.14)
    assert not pays and why.startswith("collective overlap off:")
    assert "no more than overlapping costs" in why
    assert overlap_pays(np.array([0.0001]), np.array([0.020]), 0.0)[0]  # free staging
