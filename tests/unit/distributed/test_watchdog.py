"""The stall watchdog (dba3c.distributed.watchdog): the pure bookkeeping, and the chief of an
in-process world naming the worker that never sends its gradient or its final report."""

from __future__ import annotations

import threading
import time
from typing import cast

import numpy as np
import pytest

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


def stall_in_process(worker_fn, max_steps: int) -> tuple[str, float]:
    """Chief 0 (not training), ps 1-2, workers 3-4 as threads, dist.stall_timeout 1 s;
    ``worker_fn(rank, client, transport)`` plays each worker. The chief's error message and
    the seconds it took to come."""
    cfg = make_cfg(workers=2, ps=2, max_steps=max_steps, stall_timeout=1.0)
    roles = make_roles(5, cfg)
    transports = InProcessTransport.create_world(5)
    t0 = time.monotonic()  # the watchdog's clock starts with the link
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
    with pytest.raises(TrainingError) as stalled:
        wait_until(lambda: polled(link) or time.monotonic() - t0 > 30)
    took = time.monotonic() - t0
    with pytest.raises(RuntimeError, match="aborted"):  # ends the other threads
        transports[0].abort(1)
    for thread in threads:
        thread.join(timeout=10)
    return str(stalled.value), took


def test_the_chief_names_a_worker_whose_gradient_never_comes_in_process():
    def worker(rank, client, _transport):  # worker 4 pulls, then hangs
        params = client.pull()
        while rank == 3 and params is not None:
            params = client.push(params.version, grad_of(rank, params.version))

    error, took = stall_in_process(worker, max_steps=1000)
    assert error == ("no step for 1 s, waiting on ranks [4] (workers [4]: no gradient for "
                     "step 0; dist.stall_timeout=1)")
    assert 1.0 <= took < 5.0


def test_the_chief_names_a_worker_that_never_says_goodbye_in_process():
    def worker(rank, client, transport):  # both train to the end; only worker 3 reports
        params = client.pull()
        while params is not None:
            params = client.push(params.version, grad_of(rank, params.version))
        if rank == 3:
            send_final_report(transport, rank)
            client.close()

    error, took = stall_in_process(worker, max_steps=3)
    assert error == ("no step for 1 s, waiting on ranks [4] (no final report from [4]; "
                     "dist.stall_timeout=1)")
    assert 1.0 <= took < 5.0
