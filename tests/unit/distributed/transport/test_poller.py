"""The progress thread: it polls while open, and not after."""

from __future__ import annotations

import time

from dba3c.distributed.transport.poller import Poller
from dba3c.distributed.transport.waiting import wait_until


def test_a_poller_polls_while_open_and_not_after():
    count = [0]
    with Poller(lambda: count.__setitem__(0, count[0] + 1), 0.001):
        wait_until(lambda: count[0] >= 3)
    after = count[0]
    time.sleep(0.01)
    assert count[0] == after
