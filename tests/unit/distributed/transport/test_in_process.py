"""The in-process transport: collectives over the members of a group against sums and
concatenations computed here, and their summation order."""

from __future__ import annotations

import numpy as np

from tests.support.world import check_collectives, collectives_on, run_threads


def test_in_process_collectives_sum_and_gather_over_the_members_only():
    check_collectives(run_threads(collectives_on, 4))


def test_in_process_sums_are_added_in_rank_order_in_float32():
    def add(transport):
        group = transport.split(True)
        out = np.zeros(1, np.float32)
        request = group.iallreduce(np.array([[1.0, 1e8, -1e8][transport.rank]], np.float32),
                                   out)
        while not request.test():
            pass
        return out[0]

    # (1 + 1e8) - 1e8 in float32 is 0: the order is fixed, not the exact sum
    assert run_threads(add, 3) == [0.0, 0.0, 0.0]
