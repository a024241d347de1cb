"""The in-process transport and the helpers of dba3c.distributed.transport: collectives over
the members of a group against sums and concatenations computed here, their summation
order, MPICH's algorithm variables, timer slack, the progress thread and wait_until's
back-off, and the transport view a ``dba3c bench --scale`` job plays each point on."""

from __future__ import annotations

import ctypes
import gc
import io
import sys
import threading
import time
import weakref
from typing import Any, cast

import numpy as np
import pytest

from dba3c.distributed.collective.ranks import sit_out_collective_run
from dba3c.distributed.transport import (
    PR_GET_TIMERSLACK,
    TIMER_SLACK_NS,
    InProcessTransport,
    MpiCollectives,
    MpiRequest,
    Poller,
    TransportView,
    collective_environment,
    precise_sleeps,
    wait_until,
    whole_lines,
)
from tests.support.world import check_collectives, collectives_on, run_threads


def test_in_process_collectives_sum_and_gather_over_the_members_only():
    check_collectives(run_threads(collectives_on, 4))


def test_recursive_collectives_set_mpichs_variables_unless_the_user_did():
    halving = "MPIR_CVAR_IREDUCE_SCATTER_INTRA_ALGORITHM"
    doubling = "MPIR_CVAR_IALLGATHERV_INTRA_ALGORITHM"
    allreduce = "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM"
    assert collective_environment("recursive", {"PATH": "/bin"}) == {
        halving: "sched_recursive_halving", doubling: "sched_recursive_doubling",
        allreduce: "sched_recursive_doubling"}
    assert collective_environment("recursive", {halving: "sched_pairwise"}) == {
        doubling: "sched_recursive_doubling", allreduce: "sched_recursive_doubling"}
    assert collective_environment("mpi", {}) == {}


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


def test_a_poller_polls_while_open_and_not_after():
    count = [0]
    with Poller(lambda: count.__setitem__(0, count[0] + 1), 0.001):
        wait_until(lambda: count[0] >= 3)
    after = count[0]
    time.sleep(0.01)
    assert count[0] == after


def test_wait_until_polls_quickly_at_first_then_backs_off(monkeypatch):
    import dba3c.distributed.transport as transport

    clock, sleeps = [0.0], []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(transport.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(transport.time, "sleep", fake_sleep)
    polls = iter(range(10))
    transport.wait_until(lambda: next(polls) == 9, max_sleep_s=4e-4, quick_s=3e-5,
                         quick_sleep_s=1e-5)
    # 3 quick sleeps of 10 us fill the first 30 us; then 50 us doubling to the 400 us cap
    np.testing.assert_allclose(sleeps, [1e-5] * 3 + [5e-5, 1e-4, 2e-4, 4e-4, 4e-4, 4e-4])


def test_a_view_moves_tags_per_run_and_shares_the_world_split():
    world = InProcessTransport.create_world(3)
    first = [TransportView(world[r], 2, run=0) for r in (0, 1)]
    second = [TransportView(world[r], 2, run=1) for r in (0, 1)]
    assert (second[1].rank, second[1].size) == (1, 2)
    with pytest.raises(ValueError, match="rank 2 of a world of 3 is not in a view"):
        TransportView(world[2], 2, run=0)
    with pytest.raises(ValueError, match="tag 16 is outside"):
        first[0].isend(np.zeros(1), 1, 16)
    # run 0 leaves a message unreceived; run 1's receive with the same tag does not take it
    first[0].isend(np.array([7.0]), 1, 2)
    second[0].isend(np.array([8.0]), 1, 2)
    got = np.zeros(1)
    assert second[1].irecv(got, 0, 2).test() and got[0] == 8.0
    stale = np.zeros(1)
    assert world[1].irecv(stale, 0, 2).test() and stale[0] == 7.0  # run 0's tag, unmoved
    # a collective run of 2 ranks in a world of 3: rank 2 sits it out in the same split
    groups: dict[int, Any] = {}

    def member(rank: int) -> None:
        groups[rank] = second[rank].split(True)

    threads = [threading.Thread(target=member, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    sit_out_collective_run(world[2])
    for t in threads:
        t.join(timeout=10)
    assert sorted(groups) == [0, 1]
    assert [(g.rank, g.size) for g in (groups[0], groups[1])] == [(0, 2), (1, 2)]


class Writes(io.RawIOBase):
    """A raw stream that records each write it is given."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.writes.append(bytes(b))
        return len(b)


def test_a_ranks_stderr_writes_each_printed_line_in_one_piece():
    raw = Writes()
    # as Python makes a piped stderr (over a raw stream, which typeshed does not model)
    stderr = io.TextIOWrapper(cast(io.BufferedWriter, raw), write_through=True)
    print("error: rank 3 failed", file=stderr)
    assert raw.writes == [b"error: rank 3 failed", b"\n"]  # what mpiexec could interleave
    raw.writes.clear()
    whole_lines(stderr)
    print("error: rank 3 failed", file=stderr)
    print("progress 50%", end="\r", file=stderr)
    assert raw.writes == [b"error: rank 3 failed\n", b"progress 50%\r"]
    whole_lines(object())  # a stream without reconfigure (a test's capture): left alone


class FakeMpiRequest:
    """An mpi4py request that completes when told to; like mpi4py's of a nonblocking
    collective it holds no reference to the operation's arrays."""

    def __init__(self) -> None:
        self.done = False

    def Test(self) -> bool:
        return self.done

    def Wait(self) -> None:
        self.done = True


class FakeComm:
    """The communicator calls of MpiCollectives, each a FakeMpiRequest."""

    def __init__(self) -> None:
        self.requests: list[FakeMpiRequest] = []

    def Get_rank(self) -> int:
        return 0

    def Get_size(self) -> int:
        return 1

    def _start(self, *_: Any, **__: Any) -> FakeMpiRequest:
        self.requests.append(FakeMpiRequest())
        return self.requests[-1]

    Ireduce_scatter = Iallreduce = Iallgatherv = _start


@pytest.mark.parametrize("op", ["ireduce_scatter", "iallreduce", "iallgather"])
def test_a_collective_holds_its_arrays_until_it_completes(op):
    """mpi4py keeps no reference to a nonblocking collective's arrays; an array its caller
    dropped (a staged gradient's bucket) must live until MPI is done with it: Open MPI read
    freed memory there."""
    comm = FakeComm()
    group = MpiCollectives(comm)
    grad = np.ones(8, np.float32)
    send, recv = weakref.ref(grad), np.zeros(8, np.float32)
    start = getattr(group, op)
    request = start(grad[2:6], recv) if op == "iallreduce" else start(grad[2:6], recv, [4])
    del grad
    gc.collect()
    assert send() is not None and not request.test()
    gc.collect()
    assert send() is not None  # a test that found it pending keeps it
    comm.requests[0].done = True
    assert request.test()
    gc.collect()
    assert send() is None  # released once complete
    waited = MpiRequest(FakeMpiRequest(), np.ones(2))
    waited.wait()
    assert waited.test()
