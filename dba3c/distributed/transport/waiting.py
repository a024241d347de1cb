"""How a rank waits on messages without spinning a core: :func:`wait_until` polls with a
short, growing sleep (blocking MPI calls would keep a core at 100% while waiting),
:func:`collective_wait` gives the sleeps of a rank blocked in a collective, and
:func:`precise_sleeps` makes those sleeps end on time."""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable
from typing import TypedDict


def wait_until(done: Callable[[], bool], idle: Callable[[], None] | None = None,
               max_sleep_s: float = 0.0005, quick_s: float = 0.0,
               quick_sleep_s: float = 0.0) -> None:
    """Poll ``done`` until it is true, sleeping between polls and calling ``idle`` between
    them (e.g. the chief's bookkeeping): for the first ``quick_s`` seconds sleeps of
    ``quick_sleep_s``, then 50 us (or ``max_sleep_s`` if shorter) doubling to
    ``max_sleep_s``. The quick start suits waits that are usually short, such as a
    collective's last message rounds; a long wait still backs off."""
    quick_until = time.perf_counter() + quick_s
    sleep = min(5e-5, max_sleep_s)
    while not done():
        if idle is not None:
            idle()
        if quick_s and time.perf_counter() < quick_until:
            time.sleep(quick_sleep_s)
            continue
        time.sleep(sleep)
        sleep = min(sleep * 2, max_sleep_s)


QUICK_CAPS, QUICK_DIVISOR = 20, 5


class WaitSleeps(TypedDict, total=False):
    """:func:`wait_until`'s sleep arguments."""

    max_sleep_s: float
    quick_s: float
    quick_sleep_s: float


def collective_wait(cap_s: float) -> WaitSleeps:
    """:func:`wait_until`'s sleeps for a rank blocked in a collective whose poll cap is
    ``cap_s``: ``QUICK_DIVISOR`` times faster for its first ``QUICK_CAPS`` caps (10 us for
    1 ms at the default 50 us), then backing off to the cap. With the communication hidden
    behind compute, what a step still waits for is the first layer's reduce-scatter and
    allgather, a few message rounds that each wait for a poll; a long wait (a straggler)
    still polls at the cap (docs/decisions.md, "quick polls")."""
    return {"max_sleep_s": cap_s, "quick_s": QUICK_CAPS * cap_s,
            "quick_sleep_s": cap_s / QUICK_DIVISOR}


PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30  # prctl(2) options (linux/prctl.h)
TIMER_SLACK_NS = 1000  # how late a sleep may end: Linux's default is 50 us


def precise_sleeps(slack_ns: int = TIMER_SLACK_NS) -> None:
    """Let the calling thread's sleeps, and those of the threads it starts later, end at most
    ``slack_ns`` late instead of Linux's default 50 us: with the default, a rank's short
    polling sleeps in a collective last well beyond what they ask, and every round of the
    collective waits for a poll (docs/decisions.md, "timer slack"). Does nothing where prctl
    is not Linux's."""
    if not sys.platform.startswith("linux"):
        return
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl(PR_SET_TIMERSLACK, slack_ns, 0, 0, 0)
