"""The progress thread: it polls while open and busy, and not after."""

from __future__ import annotations

import threading
import time

from dba3c.distributed.transport.poller import Poller
from dba3c.distributed.transport.waiting import wait_until


def test_a_poller_polls_while_open_and_not_after():
    count = [0]
    busy = threading.Event()
    busy.set()
    with Poller(lambda: count.__setitem__(0, count[0] + 1), 0.001, busy):
        wait_until(lambda: count[0] >= 3)
    after = count[0]
    time.sleep(0.01)
    assert count[0] == after


def test_a_poller_sleeps_while_nothing_is_in_flight():
    count = [0]
    busy = threading.Event()

    def poll() -> None:  # the third poll finds nothing left in flight
        count[0] += 1
        if count[0] % 3 == 0:
            busy.clear()

    with Poller(poll, 0.001, busy):
        time.sleep(0.01)
        assert count[0] == 0  # never busy: never polled
        busy.set()
        wait_until(lambda: not busy.is_set())
        time.sleep(0.01)
        assert count[0] == 3
        busy.set()  # posted again
        wait_until(lambda: count[0] == 6)
