"""Waiting on messages: wait_until's back-off, and the timer slack of a rank's sleeps."""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np
import pytest

from dba3c.distributed.transport import waiting
from dba3c.distributed.transport.waiting import (
    PR_GET_TIMERSLACK,
    TIMER_SLACK_NS,
    precise_sleeps,
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_precise_sleeps_set_the_timer_slack_of_the_thread_and_the_threads_it_starts():
    # a rank polls its collectives with sleeps of tens of us: Linux's default 50 us of timer
    # slack would make each sleep ~50 us longer
    prctl = ctypes.CDLL(None).prctl
    slack: dict[str, int] = {}

    def rank_main() -> None:
        slack["before"] = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
        precise_sleeps()
        slack["after"] = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
        actor = threading.Thread(
            target=lambda: slack.update(started=prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)))
        actor.start()
        actor.join()

    rank = threading.Thread(target=rank_main)
    rank.start()
    rank.join()
    assert slack["before"] == prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) != TIMER_SLACK_NS
    assert slack["after"] == slack["started"] == TIMER_SLACK_NS


def test_wait_until_polls_quickly_at_first_then_backs_off(monkeypatch):
    clock, sleeps = [0.0], []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(waiting.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(waiting.time, "sleep", fake_sleep)
    polls = iter(range(10))
    waiting.wait_until(lambda: next(polls) == 9, max_sleep_s=4e-4, quick_s=3e-5,
                       quick_sleep_s=1e-5)
    # 3 quick sleeps of 10 us fill the first 30 us; then 50 us doubling to the 400 us cap
    np.testing.assert_allclose(sleeps, [1e-5] * 3 + [5e-5, 1e-4, 2e-4, 4e-4, 4e-4, 4e-4])
