"""The parameter-server protocol on the in-process transport, with synthetic gradients.

Ranks run as threads: rank 0 is a non-training chief (a fake that records what it is told),
then the parameter servers, then the workers. Expected parameters are recomputed here with
``adam_update`` on the whole vector.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

from dba3c.distributed.mailbox import Inbox, Sender
from dba3c.distributed.ps.chief_link import ChiefLink
from dba3c.distributed.ps.client import RemoteParameterClient
from dba3c.distributed.ps.server import run_ps
from dba3c.distributed.roles import make_roles
from dba3c.distributed.transport import ANY_SOURCE, InProcessTransport, wait_until
from dba3c.distributed.wire import (
    END,
    HEADER,
    Command,
    ControlMsg,
    EvalMsg,
    GradMsg,
    InfoMsg,
    ParamsMsg,
    ReportMsg,
    StateMsg,
    Tag,
    framed_size,
)
from dba3c.learning.params import shard_bounds
from dba3c.learning.rules import OptimizerState, adam_update
from dba3c.preset import from_dict
from dba3c.training.report import WorkerReport

N = 11  # parameters: odd so shards differ in size


class FakeChief:
    """Records what the ChiefLink hands to a Chief."""

    def __init__(self):
        self.step, self.start_step, self.stop_reason = 0, 0, None
        self.extra, self.reports, self.checkpoints = {}, {}, {}

    def worker_report(self, rank, report):
        self.reports[rank] = report

    def on_step(self, step):
        self.step = step

    def save_checkpoint(self, step, theta, m, v, count):
        self.checkpoints[step] = (np.concatenate(theta), np.concatenate(m), np.concatenate(v),
                                 count)

    def on_eval(self, step, scores):
        raise AssertionError("no evaluator in these tests")


def send_final_report(t, rank: int) -> None:
    """The last report of worker ``rank``, which the chief waits for."""
    t.isend(ReportMsg(WorkerReport(), True, rank).encode(), 0, Tag.STATS)


def final_state(version: int, n: int) -> np.ndarray:
    """A PS's final StateMsg at ``version`` (Adam count = version) for a shard of ``n``."""
    zeros = np.zeros(n, np.float32)
    return StateMsg(version, version, True, zeros, zeros, zeros).encode()


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
    link = ChiefLink(transports[0], roles, cfg, chief, N)
    link.send_init(0, theta0.copy(), OptimizerState.zeros(N))
    received: dict[int, list] = {w: [] for w in roles.workers}
    errors = []

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
        threads.append(threading.Thread(target=guard, args=(
            evaluator_fn, transports[roles.evaluator], roles)))
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    wait_until(lambda: link.poll() or link.finished or errors or time.monotonic() > deadline)
    for t in threads:
        t.join(timeout=10)
    assert not errors, errors
    assert link.finished, "the run did not finish"
    return chief, received


def train_loop(delay_for=None):
    def loop(rank, client, out):
        params = client.pull()
        out.append(params)
        while params is not None:
            if delay_for and rank in delay_for:
                time.sleep(delay_for[rank])
            params = client.push(params.version, grad_of(rank, params.version))
            if params is not None:
                out.append(params)
    return loop


def reference_sync(theta0, cfg, workers, steps):
    """theta_t for t = 0..steps with Adam on the mean of every worker's gradient."""
    theta, state, thetas = theta0.copy(), OptimizerState.zeros(N), [theta0.copy()]
    for t in range(steps):
        mean = np.mean([grad_of(w, t) for w in workers], axis=0, dtype=np.float32)
        adam_update(theta, mean, state, lr=cfg.train.lr, beta1=cfg.adam.beta1,
                    beta2=cfg.adam.beta2, epsilon=cfg.adam.epsilon)
        thetas.append(theta.copy())
    return thetas, state


@pytest.mark.parametrize("ps", [1, 2, 3])
def test_sync_update_is_adam_of_the_mean_gradient(ps):
    cfg = make_cfg(workers=3, ps=ps, max_steps=4)
    theta0 = np.linspace(-1, 1, N).astype(np.float32)
    chief, received = run_world(cfg, train_loop(), theta0)
    roles = make_roles(1 + ps + 3, cfg)
    expected, state = reference_sync(theta0, cfg, roles.workers, 4)
    for params_seq in received.values():
        assert [p.version for p in params_seq] == [0, 1, 2, 3]  # version 4 ends the run
        for p in params_seq:
            np.testing.assert_allclose(p.theta, expected[p.version], rtol=1e-6, atol=1e-7)
    # the chief gathered checkpoints at steps 2 and 4 (final) with the Adam state
    assert sorted(chief.checkpoints) == [2, 4]
    theta4, m4, v4, count4 = chief.checkpoints[4]
    np.testing.assert_allclose(theta4, expected[4], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(m4, state.m_shard, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(v4, state.v_shard, rtol=1e-6, atol=1e-8)
    assert count4 == 4 and chief.step == 4


def test_parameter_servers_snapshot_every_eval_every_steps_to_the_evaluator():
    cfg = make_cfg(workers=2, ps=2, eval_every=2, max_steps=7)
    theta0 = np.linspace(-1, 1, N).astype(np.float32)
    snapshots: dict[int, dict[int, np.ndarray]] = {}  # version -> PS rank -> shard

    def evaluator(t, roles):  # records the snapshots until every PS is done
        done = set()
        while len(done) < len(roles.ps):
            for p in set(roles.ps) - done:
                buf = np.zeros(HEADER + N, np.float32)
                wait_until(t.irecv(buf, p, Tag.SNAPSHOT).test)
                msg = ParamsMsg.decode(buf)
                if msg.is_done:
                    done.add(p)
                else:
                    snapshots.setdefault(msg.version, {})[p] = msg.theta_shard.copy()
        t.isend(EvalMsg(END).encode(), 0, Tag.EVAL)  # evaluator finished

    run_world(cfg, train_loop(), theta0, evaluator)
    roles = make_roles(6, cfg)
    expected, _ = reference_sync(theta0, cfg, roles.workers, 7)
    assert sorted(snapshots) == [2, 4, 6]
    sizes = [hi - lo for lo, hi in shard_bounds(N, len(roles.ps))]
    for version, shards in snapshots.items():
        theta = np.concatenate([shards[p][:n] for p, n in zip(roles.ps, sizes)])
        np.testing.assert_allclose(theta, expected[version], rtol=1e-6, atol=1e-7)


def test_backup_workers_drop_late_gradients_and_slow_worker_catches_up():
    cfg = make_cfg(workers=3, ps=2, max_steps=15, replicas_to_aggregate=2)
    roles = make_roles(6, cfg)
    fast, slow = roles.workers[:-1], roles.workers[-1]
    delays = {**{w: 0.02 for w in fast}, slow: 0.1}
    chief, received = run_world(cfg, train_loop(delays), np.zeros(N, np.float32))
    dropped = sum(v for k, v in chief.extra.items() if k.startswith("dist/dropped_late"))
    assert dropped > 0
    fast_by_version = {p.version: p.theta for w in fast for p in received[w]}
    slow_versions = [p.version for p in received[slow]]
    assert slow_versions == sorted(set(slow_versions))
    assert max(np.diff(slow_versions)) > 1  # it skipped versions: caught up to the newest
    for p in received[slow]:  # never a mix of versions: equal to what fast workers had
        if p.version in fast_by_version:
            np.testing.assert_array_equal(p.theta, fast_by_version[p.version])


def test_async_applies_every_gradient_and_records_staleness():
    cfg = make_cfg(workers=3, ps=2, max_steps=9, mode="async")
    chief, received = run_world(cfg, train_loop(), np.zeros(N, np.float32))
    assert chief.step == 9  # one version per applied gradient
    assert "dist/staleness_mean" in chief.extra and chief.extra["dist/staleness_max"] >= 1
    assert sum(len(seq) - 1 for seq in received.values()) >= 6  # replies to pushes


def test_chief_is_not_finished_before_the_final_steps_psinfo_arrives():
    # A PS sends PSINFO(t) and then its final STATE(t), but they have different tags: the
    # chief can receive the STATE in the same poll after it looked for PSINFO. It must then
    # keep polling, or the run ends without the chief ever seeing step t (no metrics line).
    cfg = make_cfg(workers=1, ps=1, max_steps=5)
    roles = make_roles(3, cfg)
    chief_t, ps_t, worker_t = InProcessTransport.create_world(3)
    chief = FakeChief()
    link = ChiefLink(chief_t, roles, cfg, chief, N)
    ps_t.isend(final_state(5, N), 0, Tag.STATE)  # version 5, Adam count 5, final
    send_final_report(worker_t, 2)
    link.poll()
    assert link.final_states == {1: 5} and link.final_reports == {2}
    assert not link.finished and chief.step == 0
    ps_t.isend(InfoMsg(5, 0, 0, 0.0, 0, 0).encode(), 0, Tag.PSINFO)
    link.poll()
    assert link.finished and chief.step == 5


def control_messages(t: InProcessTransport) -> list[list[int]]:
    """The CONTROL messages rank ``t`` has been sent by the chief, in order."""
    received = []
    while True:
        buf = np.zeros(2, np.int64)
        if not t.irecv(buf, 0, Tag.CONTROL).test():
            return received
        received.append(buf.tolist())


def test_a_ps_frozen_behind_one_that_already_ended_is_told_to_catch_up():
    # The chief stops at train.max_steps=5 on PS 1's PSINFO and sends STOP before PS 1's
    # final state arrives. PS 1 has ended at 5 and never answers STOP; PS 2, descheduled,
    # saw STOP before the last gradients and froze at 4. PS 1 counts as frozen at 5, so
    # PS 2 gets STOP_AT 5 (it used to wait for it forever: a hang).
    cfg = make_cfg(workers=1, ps=2, max_steps=5)
    roles = make_roles(4, cfg)
    chief_t, ps1_t, ps2_t, _ = InProcessTransport.create_world(4)
    chief = FakeChief()
    link = ChiefLink(chief_t, roles, cfg, chief, N)
    chief.step, chief.stop_reason = 5, "train.max_steps=5 reached"
    link.poll()
    (lo, hi), _ = shard_bounds(N, 2)
    ps1_t.isend(final_state(5, hi - lo), 0, Tag.STATE)
    ps2_t.isend(ControlMsg(Command.FROZEN, 4).encode(), 0, Tag.CONTROL)
    link.poll()
    assert control_messages(ps2_t) == [[Command.STOP, 0], [Command.STOP_AT, 5]]
    assert control_messages(ps1_t) == [[Command.STOP, 0]]  # nothing more for a PS that has ended


def test_no_stop_once_a_ps_ended_at_max_steps_by_itself():
    cfg = make_cfg(workers=1, ps=2, max_steps=5)
    chief_t, ps1_t, ps2_t, _ = InProcessTransport.create_world(4)
    chief = FakeChief()
    link = ChiefLink(chief_t, make_roles(4, cfg), cfg, chief, N)
    (lo, hi), _ = shard_bounds(N, 2)
    ps1_t.isend(final_state(5, hi - lo), 0, Tag.STATE)
    chief.step, chief.stop_reason = 5, "train.max_steps=5 reached"
    link.poll()
    assert control_messages(ps1_t) == control_messages(ps2_t) == []  # PS 2 ends by itself


class ManualSends:
    """A transport whose sends complete only when the test says so."""

    def __init__(self):
        self.completed = 0  # sends 0 .. completed-1 have completed
        self.count = 0

    def isend(self, buf, dest, tag):
        index, self.count = self.count, self.count + 1
        transport = self

        class Request:
            def test(self) -> bool:
                return index < transport.completed
        return Request()


def test_sender_keeps_buffers_in_flight_and_releases_completed_ones():
    # a worker sends a gradient shard every step (1.3 MB for the paper network): the
    # buffers of completed sends must be freed, or memory grows by that much per step
    transport = ManualSends()
    sender, refs = Sender(transport), []
    for step in range(50):
        buf = np.full(1000, step, np.float32)
        refs.append(weakref.ref(buf))
        sender.send(buf, [1], Tag.GRAD)
        del buf
        if step < 40:
            transport.completed = step + 1  # sends up to this step have completed
    gc.collect()
    alive = [i for i, r in enumerate(refs) if r() is not None]
    # sends 40..49 have not completed: MPI may still read them, so they stay alive; every
    # completed one was released by the next send
    assert alive == list(range(40, 50))
    transport.completed = 50
    assert sender.idle()
    gc.collect()
    assert all(r() is None for r in refs)


class PostedReceives:
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


def test_inbox_with_several_receives_hands_messages_over_in_the_order_they_matched():
    # a parameter server keeps 8 gradient receives posted from any worker: a later receive
    # can complete first (a small message behind a large one), but messages must come out in
    # the order they matched, or a worker's BYE could overtake its last gradient
    transport = PostedReceives()
    inbox = Inbox(transport, ANY_SOURCE, GradMsg, framed_size(4), depth=3)
    assert len(transport.posted) == 3
    first = transport.arrive(GradMsg(7, 2, np.full(4, 1.0, np.float32)), complete=False)
    transport.arrive(GradMsg(END, 2))
    transport.arrive(GradMsg(7, 5, np.full(4, 5.0, np.float32)))
    assert inbox.poll() is None  # the first matched receive is still in progress
    # but what completed behind it can be seen (not taken): a stall names only the sender
    # whose message is stuck
    assert [(m.version, m.rank) for m in inbox.peek()] == [(END, 2), (7, 5)]
    first["done"] = True
    got = [inbox.poll() for _ in range(3)]
    assert [(m.version, m.rank) for m in got] == [(7, 2), (END, 2), (7, 5)]
    assert got[0].grad_shard.tolist() == [1.0] * 4 and got[2].grad_shard.tolist() == [5.0] * 4
    assert inbox.poll() is None and inbox.peek() == []
    # each buffer was posted again after its message: still 3 receives waiting, and the next
    # message lands in the first of them
    assert len([e for e in transport.posted if not e["matched"]]) == 3
    transport.arrive(GradMsg(8, 5, np.full(4, 6.0, np.float32)))
    assert inbox.poll().grad_shard.tolist() == [6.0] * 4
