"""Collective aggregation (``dist.aggregation: collective``).

- The transport's collectives: in-process (threads) and MPI (a real mpiexec world in which
  one rank stays out of the group), against sums and concatenations computed here.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np

from dba3c.launchers.local import find_mpiexec
from dba3c.transport import InProcessTransport, offsets

from conftest import ROOT


def run_threads(fn, size: int) -> list:
    """fn(transport) on every rank of an in-process world, as threads; their results."""
    transports = InProcessTransport.create_world(size)
    results: list = [None] * size
    errors: list = []

    def one(rank: int) -> None:
        try:
            results[rank] = fn(transports[rank])
        except BaseException as e:  # surfaced by the test
            errors.append(e)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return results


COUNTS = [3, 2, 2]  # group ranks' parts of a 7-vector


def contribution(world_rank: int) -> np.ndarray:
    return np.random.default_rng([world_rank]).normal(size=sum(COUNTS)).astype(np.float32)


def collectives_on(transport) -> tuple | None:
    """World rank 1 stays out; the others reduce-scatter, allreduce and allgather, with the
    three operations in flight at once."""
    group = transport.split(transport.rank != 1)
    if group is None:
        return None
    mine = contribution(transport.rank)
    part = np.zeros(COUNTS[group.rank], np.float32)
    total = np.zeros(2, np.int64)
    gathered = np.zeros(sum(COUNTS), np.float32)
    start = offsets(COUNTS)[group.rank]
    requests = [group.ireduce_scatter(mine, part, COUNTS),
                group.iallreduce(np.array([group.rank, 1], np.int64), total),
                group.iallgather(mine[start:start + COUNTS[group.rank]], gathered, COUNTS)]
    while not all([r.test() for r in requests]):
        pass
    return group.rank, group.size, part, total, gathered


def check_collectives(results: list) -> None:
    members = [0, 2, 3]
    assert results[1] is None
    full = sum(contribution(r).astype(np.float64) for r in members)
    pieces = np.concatenate([contribution(r)[o:o + n] for r, o, n in
                             zip(members, offsets(COUNTS), COUNTS)])
    for group_rank, world_rank in enumerate(members):
        rank, size, part, total, gathered = results[world_rank]
        assert (rank, size) == (group_rank, 3)
        o, n = offsets(COUNTS)[rank], COUNTS[rank]
        np.testing.assert_allclose(part, full[o:o + n], rtol=1e-6)
        assert total.tolist() == [0 + 1 + 2, 3]
        assert np.array_equal(gathered, pieces)


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


MPI_SCRIPT = """
import pickle, sys
sys.path.insert(0, {tests!r})
from dba3c.transport import MpiTransport
from test_collective import collectives_on
t = MpiTransport()
result = collectives_on(t)
with open({out!r} + str(t.rank), "wb") as f:
    pickle.dump(result, f)
"""


def test_mpi_collectives_sum_and_gather_over_the_members_only(tmp_path):
    import pickle

    out = str(tmp_path / "rank")
    script = MPI_SCRIPT.format(tests=str(ROOT / "tests"), out=out)
    subprocess.run([find_mpiexec(), "-n", "4", sys.executable, "-c", script], cwd=ROOT,
                   check=True, timeout=120)
    results = [pickle.loads((tmp_path / f"rank{r}").read_bytes()) for r in range(4)]
    check_collectives(results)
