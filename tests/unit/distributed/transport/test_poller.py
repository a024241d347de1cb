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


def test_a_poller_stops_when_its_last_poll_clears_the_busy_that_woke_it():
    """The lost wake-up that hung 2-rank runs: the Poller is closed (stop, then busy set to
    wake it) while a poll runs, and that poll finds nothing in flight and clears busy. The
    thread must still see stop and end, not sleep on busy for ever."""
    busy, in_poll, release = threading.Event(), threading.Event(), threading.Event()
    busy.set()

    def poll() -> None:  # what CollectiveClient.progress does once nothing is in flight
        in_poll.set()
        release.wait()
        busy.clear()

    poller = Poller(poll, 0.001, busy).__enter__()
    assert in_poll.wait(10)
    busy.clear()  # so that busy set again below shows that __exit__ has set stop
    closing = threading.Thread(target=poller.__exit__, args=(None, None, None), daemon=True)
    closing.start()
    wait_until(busy.is_set)
    release.set()  # the poll now clears the busy __exit__ set
    closing.join(10)
    assert not closing.is_alive()
