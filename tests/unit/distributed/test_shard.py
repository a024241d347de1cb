"""The shard server's aggregation rules (dba3c.distributed.shard.ShardServer): the sync mean
in any arrival order, late and future gradients, non-finite means, async staleness."""

import numpy as np
import pytest

from dba3c.distributed.shard import ShardServer
from dba3c.learning.rules import OptimizerState, adam_update
from tests.support.adam import PAPER, PAPER_ADAM, _grads

# --------------------------------------------------------------------------- ShardServer

def _server(n=5, mode="sync", replicas=3, version=0):
    theta = np.linspace(-1, 1, n).astype(np.float32)
    return ShardServer(theta, OptimizerState.zeros(n), version, mode=mode, replicas=replicas,
                       optimizer=PAPER_ADAM)


def test_sync_mean_is_the_same_bits_whatever_order_the_gradients_arrive_in():
    # a parameter server takes gradients in the order they arrive over the network: 16 of
    # them summed in float32 give a different last bit in some order for most elements
    rng = np.random.default_rng(7)
    grads = [(rng.standard_normal(4000) * 10.0 ** rng.integers(-4, 1, 4000)).astype(np.float32)
             for _ in range(16)]
    orders = [list(range(16)), list(range(15, -1, -1)), list(rng.permutation(16))]
    float32_sums = [np.add.reduce([grads[i] for i in order], dtype=np.float32)
                    for order in orders]
    assert not np.array_equal(float32_sums[0], float32_sums[1])  # order matters in float32
    thetas = []
    for order in orders:
        srv = _server(n=4000, replicas=16)
        for i in order:
            srv.offer(0, grads[i])
        thetas.append(srv.theta_shard)
    assert srv.version == 1
    for theta in thetas[1:]:
        np.testing.assert_array_equal(theta, thetas[0])
    ref, ref_state = _server(n=4000, replicas=1).theta_shard, OptimizerState.zeros(4000)
    mean = np.mean(np.stack(grads).astype(np.float64), axis=0).astype(np.float32)
    adam_update(ref, mean, ref_state, **PAPER)
    np.testing.assert_array_equal(thetas[0], ref)


def test_sync_applies_adam_of_the_mean_of_replicas_gradients():
    srv = _server()
    theta0 = srv.theta_shard.copy()
    g1, g2, g3 = _grads(5, 3, seed=4)
    assert srv.offer(0, g1) is False
    assert srv.offer(0, g2) is False
    np.testing.assert_array_equal(srv.theta_shard, theta0)  # nothing applied yet
    assert srv.version == 0
    assert srv.offer(0, g3) is True
    assert srv.version == 1 and srv.stats.applied == 1

    ref, ref_state = theta0.copy(), OptimizerState.zeros(5)
    mean = np.mean(np.stack([g1, g2, g3]).astype(np.float64), axis=0).astype(np.float32)
    adam_update(ref, mean, ref_state, **PAPER)
    np.testing.assert_allclose(srv.theta_shard, ref, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(srv.opt_state.m_shard, ref_state.m_shard, rtol=1e-6, atol=1e-9)
    assert srv.opt_state.count == 1

    # the accumulator was reset: the next step averages only its own gradients
    h = _grads(5, 3, seed=5)
    for g in h:
        srv.offer(1, g)
    mean2 = np.mean(np.stack(h).astype(np.float64), axis=0).astype(np.float32)
    adam_update(ref, mean2, ref_state, **PAPER)
    assert srv.version == 2
    np.testing.assert_allclose(srv.theta_shard, ref, rtol=1e-6, atol=1e-8)


def test_sync_drops_late_gradients_and_counts_them():
    srv = _server()
    for g in _grads(5, 3, seed=6):
        srv.offer(0, g)
    assert srv.version == 1
    theta, m = srv.theta_shard.copy(), srv.opt_state.m_shard.copy()
    assert srv.offer(0, np.ones(5, np.float32)) is False  # a 4th (backup) gradient for step 0
    assert srv.stats.dropped_late == 1
    np.testing.assert_array_equal(srv.theta_shard, theta)
    np.testing.assert_array_equal(srv.opt_state.m_shard, m)
    assert srv.version == 1
    # and it did not leak into the next step's average
    srv.offer(1, np.zeros(5, np.float32))
    srv.offer(1, np.zeros(5, np.float32))
    srv.offer(1, np.zeros(5, np.float32))
    # expected: step 0 as before, then Adam of a zero mean
    srv2 = _server()
    for g in _grads(5, 3, seed=6):
        srv2.offer(0, g)
    ref, st = srv2.theta_shard.copy(), srv2.opt_state
    adam_update(ref, np.zeros(5, np.float32), st, **PAPER)
    np.testing.assert_array_equal(srv.theta_shard, ref)


def test_sync_gradient_from_the_future_is_a_protocol_error():
    srv = _server()
    with pytest.raises(RuntimeError, match="protocol"):
        srv.offer(1, np.zeros(5, np.float32))


def test_sync_nonfinite_mean_is_skipped_and_streak_counted():
    srv = _server()
    theta0 = srv.theta_shard.copy()
    bad = np.array([0.0, np.nan, 0.0, 0.0, 0.0], np.float32)
    ok = np.ones(5, np.float32)
    for step, g in enumerate([bad, np.array([np.inf, 0, 0, 0, 0], np.float32)]):
        srv.offer(step, ok)
        srv.offer(step, g)
        assert srv.offer(step, ok) is True  # version advances although nothing was applied
        assert srv.version == step + 1
        assert srv.nonfinite_streak == step + 1
        np.testing.assert_array_equal(srv.theta_shard, theta0)
        np.testing.assert_array_equal(srv.opt_state.m_shard, np.zeros(5, np.float32))
        np.testing.assert_array_equal(srv.opt_state.v_shard, np.zeros(5, np.float32))
        assert srv.opt_state.count == 0
    assert srv.stats.nonfinite_skipped == 2 and srv.stats.applied == 0

    for _ in range(3):
        srv.offer(2, ok)
    assert srv.version == 3 and srv.nonfinite_streak == 0
    ref, st = theta0.copy(), OptimizerState.zeros(5)
    adam_update(ref, ok, st, **PAPER)  # Adam's first step, as if the skipped ones never were
    np.testing.assert_allclose(srv.theta_shard, ref, rtol=1e-6)
    assert srv.opt_state.count == 1


def _state(srv: ShardServer) -> tuple:
    """Everything a checkpoint of the shard holds, as copies."""
    return (srv.version, srv.opt_state.count, srv.theta_shard.copy(),
            srv.opt_state.m_shard.copy(), srv.opt_state.v_shard.copy())


def _same_bits(a: tuple, b: tuple) -> bool:
    return a[:2] == b[:2] and all(np.array_equal(x.view(np.uint32), y.view(np.uint32))
                                  for x, y in zip(a[2:], b[2:]))


@pytest.mark.parametrize("poisoned", [None, "head", "tail"])
def test_a_tail_updated_ahead_then_committed_is_the_whole_update_bit_for_bit(poisoned):
    # three steps with the tail [5:] computed ahead: the shard shows the step's start until
    # the step's offer, and ends where whole updates end; a non-finite gradient in either
    # part (the poisoned step 1) skips the whole step, the tail computed ahead dropped
    n, start = 8, 5
    ahead, whole = _server(n, replicas=1), _server(n, replicas=1)
    for version, g in enumerate(_grads(n, 3, seed=9)):
        if version == 1 and poisoned:
            g[0 if poisoned == "head" else n - 1] = np.nan
        before = _state(ahead)
        new_tail = ahead.update_ahead(start, g[start:].copy())
        assert _same_bits(_state(ahead), before)  # a checkpoint now sees the step's start
        whole.offer(version, g)
        if not (version == 1 and poisoned):  # the tail's new values, ahead of the commit
            assert np.array_equal(new_tail, whole.theta_shard[start:])
        ahead.offer(version, g)
        assert _same_bits(_state(ahead), _state(whole))
        assert ahead.nonfinite_streak == whole.nonfinite_streak
    assert ahead.stats.nonfinite_skipped == (1 if poisoned else 0)
    assert ahead.opt_state.count == (2 if poisoned else 3)


def test_a_tail_ahead_is_refused_where_several_gradients_make_a_step_or_twice_a_step():
    with pytest.raises(RuntimeError, match="update_ahead needs a sync shard of one gradient"):
        _server(replicas=3).update_ahead(2, np.zeros(3, np.float32))
    srv = _server(replicas=1)
    srv.update_ahead(2, np.zeros(3, np.float32))
    with pytest.raises(RuntimeError, match="once a step"):
        srv.update_ahead(2, np.zeros(3, np.float32))


def test_async_applies_every_gradient_and_records_staleness():
    srv = _server(mode="async", replicas=3, version=10)
    ref, st = srv.theta_shard.copy(), OptimizerState.zeros(5)
    gs = _grads(5, 3, seed=7)
    for grad_version, g in zip([10, 10, 11], gs):
        assert srv.offer(grad_version, g) is True
        adam_update(ref, g, st, **PAPER)
        np.testing.assert_array_equal(srv.theta_shard, ref)
    assert srv.version == 13
    # versions at arrival 10, 11, 12 minus computed-at 10, 10, 11
    assert srv.stats.staleness == [0, 1, 1]
    assert srv.stats.applied == 3 and srv.stats.dropped_late == 0
