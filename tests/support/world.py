"""Ranks as threads on the in-process transport, with synthetic gradients: the parameter
servers' world (a fake chief, then the servers, then the workers) and the collectives'."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, cast

import ml_dtypes
import numpy as np

from dba3c.core import offsets
from dba3c.distributed.ps.chief_link import ChiefLink
from dba3c.distributed.ps.client import RemoteParameterClient
from dba3c.distributed.ps.server import run_ps
from dba3c.distributed.roles import make_roles
from dba3c.distributed.transport.in_process import InProcessTransport
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.wire import ReportMsg, Tag
from dba3c.learning.params import ParamLayout
from dba3c.learning.rules import OptimizerState
from dba3c.preset import from_dict
from dba3c.training.report import WorkerReport

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dba3c.core import Collectives, Request
    from dba3c.training.chief import Chief

N = 11  # parameters: odd so shards differ in size


class FakeChief:
    """Records what the ChiefLink hands to a Chief."""

    def __init__(self):
        self.step, self.start_step, self.stop_reason, self.signal = 0, 0, None, None
        self.extra, self.reports, self.checkpoints = {}, {}, {}
        self.layout = ParamLayout((), ())  # no layer: an evaluation carries no active units

    def worker_report(self, rank, report):
        self.reports[rank] = report

    def on_step(self, step):
        self.step = step

    def save_checkpoint(self, step, theta, m, v, count):
        self.checkpoints[step] = (np.concatenate(theta), np.concatenate(m), np.concatenate(v),
                                 count)

    def on_eval(self, evaluation):
        raise AssertionError("no evaluator in these tests")

    def as_chief(self) -> Chief:
        """This fake where a ChiefLink takes a Chief: it has the methods the link calls."""
        return cast("Chief", self)


def send_final_report(t, rank: int) -> None:
    """The last report of worker ``rank``, which the chief waits for."""
    t.isend(ReportMsg(WorkerReport(), True, rank).encode(), 0, Tag.STATS)


def grad_of(rank: int, version: int) -> np.ndarray:
    """A deterministic synthetic gradient."""
    return np.random.default_rng([rank, version]).normal(size=N).astype(np.float32)


def make_cfg(workers: int, ps: int, eval_every: int = 0, **dist):
    return from_dict({
        "env": {"id": "CartPole-v1"}, "model": {"kind": "mlp"},
        "train": {"max_steps": dist.pop("max_steps", 4), "lr": 0.01},
        "dist": {"ps": ps, "workers": workers, "chief_trains": False, **dist},
        "run": {"checkpoint_every": 2},
        "eval": {"every": eval_every, "rank": eval_every > 0, "episodes": 1},
    })


def run_world(cfg, worker_fn, theta0, evaluator_fn=None):
    """Start chief + PS + worker (+ evaluator) threads; return (fake chief, {rank: [Params,
    ...]})."""
    roles = make_roles(1 + cfg.dist.ps + cfg.dist.workers + int(cfg.eval.rank), cfg)
    transports = InProcessTransport.create_world(roles.world_size)
    chief = FakeChief()
    link = ChiefLink(transports[0], roles, cfg, chief.as_chief(), N)
    link.send_init(0, theta0.copy(), OptimizerState.zeros(N))
    received: dict[int, list] = {w: [] for w in roles.workers}
    errors: list[BaseException] = []

    def guard(fn, *args):
        try:
            fn(*args)
        except BaseException as e:  # surfaced by the test
            errors.append(e)

    def worker(rank):
        client = RemoteParameterClient(transports[rank], roles, cfg, N)
        worker_fn(rank, client, received[rank])
        send_final_report(transports[rank], rank)
        client.close()

    threads = [threading.Thread(target=guard, args=(run_ps, transports[p], roles, cfg, N))
               for p in roles.ps]
    threads += [threading.Thread(target=guard, args=(worker, w)) for w in roles.workers]
    if evaluator_fn is not None:
        assert roles.evaluator is not None
        threads.append(threading.Thread(target=guard, args=(
            evaluator_fn, transports[roles.evaluator], roles)))
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30

    def ended() -> bool:
        link.poll()
        return link.finished or bool(errors) or time.monotonic() > deadline

    wait_until(ended)
    for t in threads:
        t.join(timeout=10)
    assert not errors, errors
    assert link.finished, "the run did not finish"
    return chief, received


def train_loop(first_push_after=None, before_push=None):
    """Each worker pulls, then pushes its gradient of the version it holds until the run ends;
    ``first_push_after`` (a threading.Barrier) holds every first push until all workers have
    pulled; ``before_push(rank, version)`` runs before each push (a test holds workers
    there to order the pushes)."""
    def loop(rank, client, out):
        params = client.pull()
        out.append(params)
        if first_push_after is not None:
            first_push_after.wait()
        while params is not None:
            if before_push is not None:
                before_push(rank, params.version)
            params = client.push(params.version, grad_of(rank, params.version))
            if params is not None:
                out.append(params)
    return loop


class FakeTransport:
    """A Transport whose members fail when used: a fake overrides the ones its test needs."""

    rank, size = 0, 1
    hosts: Sequence[str] = ("localhost",)

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Request:
        raise AssertionError("this fake transport does not send")

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Request:
        raise AssertionError("this fake transport does not receive")

    def abort(self, code: int) -> None:
        raise AssertionError(f"aborted with exit code {code}")

    def split(self, member: bool) -> Collectives | None:
        raise AssertionError("this fake transport has no collectives")


class PostedReceives(FakeTransport):
    """Receives matched to arriving messages in the order they were posted (MPI's rule);
    each completes when the test says so."""

    def __init__(self):
        self.posted: list[dict] = []

    def irecv(self, buf, source, tag):
        entry = {"buf": buf, "matched": False, "done": False}
        self.posted.append(entry)

        class Request:
            def test(self) -> bool:
                return entry["done"]
        return Request()

    def arrive(self, msg, complete: bool = True) -> dict:
        entry = next(e for e in self.posted if not e["matched"])
        data = msg.encode()
        entry["buf"][:data.size] = data
        entry["matched"], entry["done"] = True, complete
        return entry


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


def round_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """Finite float32 ``x`` rounded to the nearest bfloat16 (ties to even), as float32: the
    upper 16 bits of each float32 after adding just under half of bfloat16's last place,
    plus the 16th bit (written here from the format, not with ml_dtypes)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def collectives_on(transport) -> tuple | None:
    """World rank 1 stays out; the others reduce-scatter, allreduce (a control vector and a
    float32 bucket, as a replicated first bucket is summed) and allgather, with the four
    operations in flight at once; then reduce-scatter and allreduce the same contribution
    in bfloat16 (``dist.wire_dtype``); then an allgather on a duplicate of the group and an
    allreduce on the group, which group rank 0 starts in the other order."""
    group = transport.split(transport.rank != 1)
    if group is None:
        return None
    mine = contribution(transport.rank)
    part = np.zeros(COUNTS[group.rank], np.float32)
    total = np.zeros(2, np.int64)
    gathered = np.zeros(sum(COUNTS), np.float32)
    summed = np.zeros(sum(COUNTS), np.float32)
    start = offsets(COUNTS)[group.rank]
    requests = [group.ireduce_scatter(mine, part, COUNTS),
                group.iallreduce(np.array([group.rank, 1], np.int64), total),
                group.iallreduce(mine, summed),
                group.iallgather(mine[start:start + COUNTS[group.rank]], gathered, COUNTS)]
    mine16 = mine.astype(ml_dtypes.bfloat16)
    part16 = np.zeros(COUNTS[group.rank], ml_dtypes.bfloat16)
    summed16 = np.zeros(sum(COUNTS), ml_dtypes.bfloat16)
    requests += [group.ireduce_scatter(mine16, part16, COUNTS),
                 group.iallreduce(mine16, summed16)]
    # a duplicate group's operation and this group's, started in another order by rank 0
    twin = group.duplicate()
    twin_gathered, twin_total = np.zeros(sum(COUNTS), np.float32), np.zeros(2, np.int64)
    pair = [lambda: twin.iallgather(mine[start:start + COUNTS[group.rank]], twin_gathered,
                                    COUNTS),
            lambda: group.iallreduce(np.array([group.rank, 2], np.int64), twin_total)]
    requests += [start_op() for start_op in (pair[::-1] if group.rank == 0 else pair)]
    while not all([r.test() for r in requests]):
        pass
    return (group.rank, group.size, part, total, gathered, summed, part16.astype(np.float32),
            summed16.astype(np.float32), twin_gathered, twin_total)


def check_collectives(results: list) -> None:
    members = [0, 2, 3]
    assert results[1] is None
    full = cast(np.ndarray, sum(contribution(r).astype(np.float64) for r in members))
    pieces = np.concatenate([contribution(r)[o:o + n] for r, o, n in
                             zip(members, offsets(COUNTS), COUNTS)])
    # bfloat16: each contribution rounded once, and each of the two sums of two partial sums
    # once more, each rounding off by at most 2^-8 of what it rounds
    magnitude = sum(np.abs(contribution(r)) for r in members)
    bfloat16_tol = 3 * 2.0 ** -8 * magnitude
    # every member's sum has the same bits (a replicated first bucket relies on it), in
    # float32 and in bfloat16
    for slot in (5, 7):
        sums = [results[r][slot] for r in members]
        assert all(np.array_equal(s.view(np.uint32), sums[0].view(np.uint32)) for s in sums)
    np.testing.assert_allclose(results[0][5], full, rtol=1e-6)
    assert np.all(np.abs(results[0][7] - full) <= bfloat16_tol)
    assert np.array_equal(results[0][7], round_to_bfloat16(results[0][7]))  # bfloat16 values
    for group_rank, world_rank in enumerate(members):
        rank, size, part, total, gathered, _, part16, _, twin_gathered, twin_total = \
            results[world_rank]
        assert (rank, size) == (group_rank, 3)
        o, n = offsets(COUNTS)[rank], COUNTS[rank]
        np.testing.assert_allclose(part, full[o:o + n], rtol=1e-6)
        assert np.all(np.abs(part16 - full[o:o + n]) <= bfloat16_tol[o:o + n])
        assert total.tolist() == [0 + 1 + 2, 3]
        assert np.array_equal(gathered, pieces)
        assert np.array_equal(twin_gathered, pieces) and twin_total.tolist() == [3, 6]
