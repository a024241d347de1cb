"""Adam on flat shards (dba3c.learning.rules) against Keras, shard equivalence, and the shard
server's
aggregation rules (dba3c.distributed.shard.ShardServer)."""

import numpy as np
import pytest
import tensorflow as tf

from dba3c.config import AdamConfig
from dba3c.distributed.shard import ShardServer
from dba3c.learning.optim import Optimizer
from dba3c.learning.params import shard_bounds
from dba3c.learning.rules import OptimizerState, adam_update
from dba3c.training.runner import LocalParameterServer

PAPER = dict(lr=1e-3, beta1=0.8, beta2=0.75, epsilon=1e-8)
PAPER_ADAM = Optimizer("adam", PAPER["lr"], adam=AdamConfig(PAPER["beta1"], PAPER["beta2"],
                                                            PAPER["epsilon"]))
KERAS_DEFAULTS = dict(lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-7)


def _grads(n, steps, seed=0):
    rng = np.random.default_rng(seed)
    # gradients of very different scales per step, so bias correction matters
    return [(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 2)).astype(np.float32)
            for _ in range(steps)]


@pytest.mark.parametrize("hyper", [PAPER, KERAS_DEFAULTS, dict(lr=0.05, beta1=0.5,
                                                                beta2=0.9, epsilon=1e-3)],
                         ids=["paper", "keras_defaults", "large_lr_eps"])
def test_adam_update_matches_keras_adam(hyper):
    n, steps = 37, 5
    theta0 = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    grads = _grads(n, steps)

    var = tf.Variable(theta0)
    opt = tf.keras.optimizers.Adam(learning_rate=hyper["lr"], beta_1=hyper["beta1"],
                                   beta_2=hyper["beta2"], epsilon=hyper["epsilon"])
    theta, state = theta0.copy(), OptimizerState.zeros(n)
    for t, g in enumerate(grads, start=1):
        opt.apply_gradients([(tf.constant(g), var)])
        adam_update(theta, g, state, **hyper)
        assert state.count == t
        np.testing.assert_allclose(theta, var.numpy(), rtol=1e-6, atol=1e-7,
                                   err_msg=f"step {t}")
    assert theta.dtype == np.float32 and state.m_shard.dtype == np.float32
    assert not np.array_equal(theta, theta0)


@pytest.mark.parametrize("with_scratch", [False, True], ids=["allocating", "scratch"])
def test_adam_update_is_bit_identical_to_the_formulas_with_temporaries(with_scratch):
    n = 1001
    lr, b1, b2, eps = (PAPER[k] for k in ("lr", "beta1", "beta2", "epsilon"))
    theta0 = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    ref_theta, ref_m, ref_v = theta0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
    theta, state = theta0.copy(), OptimizerState.zeros(n)
    scratch = np.full((2, n), np.nan, np.float32) if with_scratch else None
    for t, g in enumerate(_grads(n, 6, seed=4), start=1):
        alpha_t = np.float32(lr * np.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t))
        ref_m = ref_m + (g - ref_m) * np.float32(1.0 - b1)
        ref_v = ref_v + (g * g - ref_v) * np.float32(1.0 - b2)
        ref_theta = ref_theta - alpha_t * ref_m / (np.sqrt(ref_v) + np.float32(eps))
        adam_update(theta, g, state, **PAPER, scratch=scratch)
        assert np.array_equal(state.m_shard, ref_m) and np.array_equal(state.v_shard, ref_v)
        assert np.array_equal(theta, ref_theta), f"step {t}"


def test_adam_first_step_by_hand():
    # t = 1: m = (1-b1) g, v = (1-b2) g^2, alpha = lr sqrt(1-b2) / (1-b1)
    # -> step = lr * sqrt(1-b2)/(1-b1) * (1-b1) g / (sqrt(1-b2) |g| + eps) ~= lr * sign(g)
    theta = np.array([1.0, -2.0, 0.0], np.float32)
    g = np.array([0.5, -4.0, 0.0], np.float32)
    state = OptimizerState.zeros(3)
    adam_update(theta, g, state, **PAPER)
    np.testing.assert_allclose(theta, [1.0 - 1e-3, -2.0 + 1e-3, 0.0], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(state.m_shard, 0.2 * g, rtol=1e-6)
    np.testing.assert_allclose(state.v_shard, 0.25 * g ** 2, rtol=1e-6)


@pytest.mark.parametrize("num_shards", [1, 2, 3, 7])
def test_sharded_adam_equals_whole_vector_adam(num_shards):
    n, steps = 23, 4
    theta0 = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    grads = _grads(n, steps, seed=3)

    whole, whole_state = theta0.copy(), OptimizerState.zeros(n)
    bounds = shard_bounds(n, num_shards)
    shards = [theta0[a:b].copy() for a, b in bounds]
    states = [OptimizerState.zeros(b - a) for a, b in bounds]
    for g in grads:
        adam_update(whole, g, whole_state, **PAPER)
        for (a, b), shard, st in zip(bounds, shards, states):
            adam_update(shard, g[a:b], st, **PAPER)
    assert np.array_equal(np.concatenate(shards), whole)
    assert np.array_equal(np.concatenate([s.m_shard for s in states]), whole_state.m_shard)
    assert np.array_equal(np.concatenate([s.v_shard for s in states]), whole_state.v_shard)
    assert all(s.count == steps for s in states)


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


def test_local_parameter_server_push_is_one_adam_step():
    theta0 = np.array([0.5, -0.5], np.float32)
    ps = LocalParameterServer(theta0.copy(), OptimizerState.zeros(2), 7, PAPER_ADAM)
    p = ps.pull()
    assert p.version == 7
    np.testing.assert_array_equal(p.theta, theta0)
    nxt = ps.push(7, np.array([1.0, -1.0], np.float32))
    assert nxt.version == 8
    np.testing.assert_allclose(nxt.theta, [0.5 - 1e-3, -0.5 + 1e-3], rtol=1e-5)
    p.theta[:] = 99  # pulled copies are independent of the server's vector
    assert ps.pull().theta[0] != 99
