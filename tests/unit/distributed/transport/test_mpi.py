"""The MPI transport without MPI: MPICH's algorithm variables, a collective's arrays held
until it completes, and the transport view a ``dba3c bench scale`` job plays each point on
(over an in-process world)."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import numpy as np
import pytest

from dba3c.distributed.collective.ranks import sit_out_collective_run
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.distributed.transport.mpi import (
    MpiCollectives,
    MpiRequest,
    TransportView,
    add_bfloat16,
    collective_environment,
)
from tests.support.world import round_to_bfloat16


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


def test_mpi_s_bfloat16_sum_adds_16_bit_words_in_float32_and_rounds_in_either_order():
    rng = np.random.default_rng(0)
    a, b = (round_to_bfloat16(rng.standard_normal(9).astype(np.float32)) for _ in range(2))

    def words(x: np.ndarray) -> bytearray:  # bfloat16 as MPI moves it: a float32's upper half
        return bytearray((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())

    def floats(buf: bytearray) -> np.ndarray:
        return (np.frombuffer(bytes(buf), np.uint16).astype(np.uint32) << 16).view(np.float32)

    expected = round_to_bfloat16(a + b)
    for x, y in ((a, b), (b, a)):
        inout = words(y)
        add_bfloat16(memoryview(words(x)), memoryview(inout))
        assert np.array_equal(floats(inout), expected)


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
