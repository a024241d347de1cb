"""The parameter-server protocol on the in-process transport, with synthetic gradients.

Ranks run as threads: rank 0 is a non-training chief (a fake that records what it is told),
then the parameter servers, then the workers. Expected parameters are recomputed here with
``adam_update`` on the whole vector."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dba3c.distributed.roles import make_roles
from dba3c.distributed.transport.waiting import wait_until
from dba3c.distributed.wire import (
    END,
    HEADER,
    EvalMsg,
    ParamsMsg,
    Tag,
)
from dba3c.learning.params import shard_bounds
from dba3c.learning.rules import OptimizerState, adam_update
from tests.support.world import (
    N,
    grad_of,
    make_cfg,
    round_to_bfloat16,
    run_world,
    train_loop,
)


def reference_sync(theta0, cfg, workers, steps, wire=lambda g: g):
    """theta_t for t = 0..steps with Adam on the mean of every worker's gradient (each as
    ``wire`` delivers it)."""
    theta, state, thetas = theta0.copy(), OptimizerState.zeros(N), [theta0.copy()]
    for t in range(steps):
        mean = np.asarray(np.mean([wire(grad_of(w, t)) for w in workers], axis=0,
                                  dtype=np.float32))
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


@pytest.mark.parametrize("ps", [1, 2])
def test_a_bfloat16_wire_step_is_adam_of_the_mean_of_the_rounded_gradients(ps):
    # each worker's slice arrives rounded to bfloat16 (round_to_bfloat16, written from the
    # format) and the PS sums in float32: float32 summation tolerance against that reference
    cfg = make_cfg(workers=3, ps=ps, max_steps=4, wire_dtype="bfloat16")
    theta0 = np.linspace(-1, 1, N).astype(np.float32)
    _, received = run_world(cfg, train_loop(), theta0)
    workers = make_roles(1 + ps + 3, cfg).workers
    expected, _ = reference_sync(theta0, cfg, workers, 4, round_to_bfloat16)
    for params_seq in received.values():
        assert [p.version for p in params_seq] == [0, 1, 2, 3]
        for p in params_seq:
            np.testing.assert_allclose(p.theta, expected[p.version], rtol=1e-6, atol=1e-7)
    float32, _ = reference_sync(theta0, cfg, workers, 4)
    assert not np.allclose(expected[3], float32[3], rtol=1e-6, atol=1e-7)  # it did round


def test_parameter_servers_snapshot_every_eval_every_steps_and_the_last_to_the_evaluator():
    cfg = make_cfg(workers=2, ps=2, eval_every=2, max_steps=7)
    theta0 = np.linspace(-1, 1, N).astype(np.float32)
    snapshots: dict[int, dict[int, np.ndarray]] = {}  # version -> PS rank -> shard

    def evaluator(t, roles):  # records the snapshots until every PS is done
        done: set[int] = set()
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
    assert sorted(snapshots) == [2, 4, 6, 7]  # 7: the step the run ended at (eval.at_end)
    sizes = [hi - lo for lo, hi in shard_bounds(N, len(roles.ps))]
    for version, shards in snapshots.items():
        theta = np.concatenate([shards[p][:n] for p, n in zip(roles.ps, sizes)])
        np.testing.assert_allclose(theta, expected[version], rtol=1e-6, atol=1e-7)


def test_backup_workers_drop_late_gradients_and_slow_worker_catches_up():
    # 2 of 3 gradients make a step. The slow worker's first gradient (of version 0) is held
    # until both fast workers hold version 2, and they push on only once it is sent: it is
    # late at every shard, and the newest parameters (version 2) are already there for it
    cfg = make_cfg(workers=3, ps=2, max_steps=15, replicas_to_aggregate=2)
    roles = make_roles(6, cfg)
    fast, slow = roles.workers[:-1], roles.workers[-1]
    all_hold_version_0 = threading.Barrier(3, timeout=60)
    fast_hold_version_2 = threading.Barrier(3, timeout=60)
    late_gradient_sent = threading.Event()

    def hold(rank, version):
        if rank == slow and version == 0:
            fast_hold_version_2.wait()
        elif rank == slow:  # its push of version 0 returned
            late_gradient_sent.set()
        elif version == 2:
            fast_hold_version_2.wait()
            assert late_gradient_sent.wait(60)

    chief, received = run_world(
        cfg, train_loop(first_push_after=all_hold_version_0, before_push=hold),
        np.zeros(N, np.float32))
    assert all(chief.extra[f"dist/dropped_late/ps{p}"] >= 1 for p in roles.ps)
    fast_by_version = {p.version: p.theta for w in fast for p in received[w]}
    slow_versions = [p.version for p in received[slow]]
    assert slow_versions == sorted(set(slow_versions))
    assert slow_versions[:2] == [0, 2]  # it skipped version 1: caught up to the newest
    for p in received[slow]:  # never a mix of versions: equal to what fast workers had
        if p.version in fast_by_version:
            np.testing.assert_array_equal(p.theta, fast_by_version[p.version])


def test_async_parameter_servers_apply_every_gradient_and_record_staleness():
    cfg = make_cfg(workers=3, ps=2, max_steps=9, mode="async")
    # all three first gradients are of version 0: a shard applies them at versions 0, 1, 2
    all_hold_version_0 = threading.Barrier(3, timeout=60)
    chief, received = run_world(cfg, train_loop(first_push_after=all_hold_version_0),
                                np.zeros(N, np.float32))
    assert chief.step == 9  # one version per applied gradient
    assert chief.extra["dist/staleness_max"] >= 2
    assert chief.extra["dist/staleness_mean"] > 0
    assert sum(len(seq) - 1 for seq in received.values()) >= 6  # replies to pushes
