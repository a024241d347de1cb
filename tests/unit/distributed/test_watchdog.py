"""The stall watchdog (dba3c.distributed.watchdog): the pure bookkeeping, and the chief of an
in-process world naming the worker that never sends its gradient or its final report."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from dba3c.distributed import chief_inbox
from dba3c.distributed.ps import chief_link
from dba3c.distributed.ps.chief_link import ChiefLink
from dba3c.distributed.ps.client import RemoteParameterClient
from dba3c.distributed.ps.server import run_ps
from dba3c.distributed.roles import make_roles
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.watchdog import StallClock, query_lead, stalled_ranks
from dba3c.errors import TrainingError
from dba3c.learning.rules import OptimizerState
from dba3c.training.chief import Chief
from tests.support.world import FakeChief, N, grad_of, make_cfg, send_final_report


def test_stall_clock_queries_once_before_the_timeout_and_restarts_on_progress():
    clock = StallClock(10.0, since=100.0)
    assert query_lead(10.0) == 5.0 and query_lead(4.0) == 2.0
    assert not clock.query_due(104.9) and clock.query_due(105.0)
    assert not clock.query_due(106.0)  # once per stall
    assert not clock.expired(109.9) and clock.expired(110.0)
    clock.progress(111.0)
    assert not clock.expired(120.9) and clock.query_due(116.0) and clock.expired(121.0)
    off = StallClock(0.0, since=0.0)
    assert not off.query_due(1e9) and not off.expired(1e9)


def test_stalled_ranks_names_silent_servers_and_missing_gradients_of_the_lowest_step():
    workers = (0, 4, 5, 6)
    # ps 2 is at step 8 still lacking 5 and 6; ps 1 already moved on; ps 3 is silent
    ranks, why = stalled_ranks(workers, (1, 2, 3), {1: (9, set()), 2: (8, {0, 4})}, {3: 8})
    assert ranks == [3, 5, 6]
    assert "parameter servers [3] do not answer" in why
    assert "workers [5, 6]: no gradient for step 8" in why
    assert stalled_ranks(workers, (1,), {1: (3, {0, 4, 6})}, {1: 3}) == (
        [5], "workers [5]: no gradient for step 3")
    # ps 2 fell silent at step 4; ps 1 finished step 4 and waits for workers that wait for
    # ps 2's parameters: only ps 2 is named
    assert stalled_ranks(workers, (1, 2), {1: (5, set())}, {1: 5, 2: 4}) == (
        [2], "parameter servers [2] do not answer")
    assert stalled_ranks(workers, (1, 2), {}, {})[0] == [1, 2]


def polled(link: ChiefLink) -> bool:
    """Poll the chief's link once (it returns nothing): False, so the wait goes on."""
    link.poll()
    return False


def poll_until(link: ChiefLink, condition: Callable[[], bool], what: str) -> None:
    """Poll the chief's link until ``condition`` holds; fail after 60 s (a hang)."""
    deadline = time.monotonic() + 60
    wait_until(lambda: polled(link) or condition() or time.monotonic() > deadline)
    assert condition(), f"{what} did not happen in 60 s"


def stall_in_process(monkeypatch, worker_fn, max_steps: int,
                     stalled: Callable[[ChiefLink], bool]) -> str:
    """Chief 0 (not training), ps 1-2, workers 3-4 as threads, dist.stall_timeout 1 s;
    ``worker_fn(rank, client, transport)`` plays each worker. The chief's watchdog runs on a
    clock of its own that stands still until ``stalled(link)``: then it reaches the query
    (the answers awaited), just short of the timeout (no error yet) and the timeout. The
    chief's error message."""
    clock = [0.0]
    for module in (chief_link, chief_inbox):
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    cfg = make_cfg(workers=2, ps=2, max_steps=max_steps, stall_timeout=1.0)
    roles = make_roles(5, cfg)
    transports = InProcessTransport.create_world(5)
    link = ChiefLink(transports[0], roles, cfg, cast(Chief, FakeChief()), N)
    link.send_init(0, np.zeros(N, np.float32), OptimizerState.zeros(N))

    def until_aborted(fn, *args) -> None:
        try:
            fn(*args)
        except RuntimeError as e:  # the end of the test's world, anything else fails it
            if "aborted" not in str(e):
                raise

    threads = [threading.Thread(target=until_aborted, args=(run_ps, transports[p], roles,
                                                             cfg, N)) for p in roles.ps]
    threads += [threading.Thread(target=until_aborted, args=(
        worker_fn, w, RemoteParameterClient(transports[w], roles, cfg, N), transports[w]))
        for w in roles.workers]
    for thread in threads:
        thread.daemon = True
        thread.start()
    poll_until(link, lambda: stalled(link), "the stall")
    since = link.clock.since  # the last progress
    running = [p for p in roles.ps if p not in link.final_states]
    clock[0] = since + 1.0 - query_lead(1.0)
    poll_until(link, lambda: sorted(link.answers) == running, "the servers' answers")
    clock[0] = since + 0.999
    link.poll()  # not yet
    clock[0] = since + 1.0
    with pytest.raises(TrainingError) as stalled_error:
        link.poll()
    with pytest.raises(RuntimeError, match="aborted"):  # ends the other threads
        transports[0].abort(1)
    for thread in threads:
        thread.join(timeout=10)
    return str(stalled_error.value)


def test_the_chief_names_a_worker_whose_gradient_never_comes_in_process(monkeypatch):
    gradient_sent = threading.Event()

    def worker(rank, client, _transport):  # worker 4 pulls, then hangs
        params = client.pull()
        if rank == 3:  # its push waits (calling idle) for a step that never comes
            client.idle = gradient_sent.set
            client.push(params.version, grad_of(rank, params.version))

    error = stall_in_process(monkeypatch, worker, max_steps=1000,
                             stalled=lambda _link: gradient_sent.is_set())
    assert error == ("no step for 1 s, waiting on ranks [4] (workers [4]: no gradient for "
                     "step 0; dist.stall_timeout=1)")


def test_the_chief_names_a_worker_that_never_says_goodbye_in_process(monkeypatch):
    def worker(rank, client, transport):  # both train to the end; only worker 3 reports
        params = client.pull()
        while params is not None:
            params = client.push(params.version, grad_of(rank, params.version))
        if rank == 3:
            send_final_report(transport, rank)
            client.close()

    def stalled(link: ChiefLink) -> bool:  # every shard final, worker 3's report in
        return len(link.final_states) == 2 and link.final_reports == {3}

    error = stall_in_process(monkeypatch, worker, max_steps=3, stalled=stalled)
    assert error == ("no step for 1 s, waiting on ranks [4] (no final report from [4]; "
                     "dist.stall_timeout=1)")
