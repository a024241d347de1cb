"""Adam on flat shards (dba3c.learning.rules): against Keras, the formulas with
temporaries, the first step by hand, and shard equivalence."""

import numpy as np
import pytest
import tensorflow as tf

from dba3c.learning.fpenv import FLUSHES
from dba3c.learning.params import shard_bounds
from dba3c.learning.rules import OptimizerState, adam_update, rmsprop_update
from tests.support.adam import PAPER, AdamHyper, _grads

KERAS_DEFAULTS = AdamHyper(lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-7)


@pytest.mark.parametrize("hyper", [PAPER, KERAS_DEFAULTS, AdamHyper(lr=0.05, beta1=0.5,
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


def _decaying_state(n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """theta and the steps' gradients: after the first step zero in most elements (dead units:
    their moments shrink into the subnormal range)."""
    rng = np.random.default_rng(5)
    g0 = (rng.standard_normal(n) * 1e-4).astype(np.float32)
    alive = np.where(np.arange(n) % 4 == 0, g0, np.float32(0.0))
    return rng.standard_normal(n).astype(np.float32), [g0] + [alive] * 400


@pytest.mark.skipif(not FLUSHES, reason="no known fenv_t layout on this platform")
def test_adam_moments_flush_to_zero_as_tensorflow_computes():
    # TensorFlow's kernels run with subnormals flushed (FTZ/DAZ): the same formulas, evaluated
    # op by op by TensorFlow, are the reference; IEEE NumPy would keep subnormal moments
    n = 64
    lr, b1, b2, eps = (PAPER[k] for k in ("lr", "beta1", "beta2", "epsilon"))
    theta0, grads = _decaying_state(n)
    theta, state = theta0.copy(), OptimizerState.zeros(n)
    ref_theta, ref_m, ref_v = (tf.constant(x) for x in (theta0, np.zeros(n, np.float32),
                                                        np.zeros(n, np.float32)))
    ieee_m = np.zeros(n, np.float32)
    for t, g in enumerate(grads, start=1):
        alpha_t = np.float32(lr * np.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t))
        ref_m = ref_m + (g - ref_m) * np.float32(1.0 - b1)
        ref_v = ref_v + (tf.square(g) - ref_v) * np.float32(1.0 - b2)
        ref_theta = ref_theta - alpha_t * ref_m / (tf.sqrt(ref_v) + np.float32(eps))
        ieee_m = ieee_m + (g - ieee_m) * np.float32(1.0 - b1)
        adam_update(theta, g, state, **PAPER)
    tiny = np.finfo(np.float32).tiny
    assert np.any((ieee_m != 0) & (np.abs(ieee_m) < tiny)), "the case reaches subnormals"
    assert np.array_equal(state.m_shard, ref_m.numpy())
    assert np.array_equal(state.v_shard, ref_v.numpy())
    np.testing.assert_array_equal(theta, ref_theta.numpy())
    for moment in (state.m_shard, state.v_shard):
        assert not np.any((moment != 0) & (np.abs(moment) < tiny))


@pytest.mark.skipif(not FLUSHES, reason="no known fenv_t layout on this platform")
def test_rmsprop_mean_square_flushes_to_zero_as_tensorflow_computes():
    n, lr, alpha, eps = 64, 1e-3, 0.99, 0.1
    theta0, grads = _decaying_state(n)
    grads = [g * np.float32(1e-15) for g in grads]  # mean squares near 1e-38 within 400 steps
    theta, state = theta0.copy(), OptimizerState.zeros(n)
    ref_theta, ref_v = tf.constant(theta0), tf.zeros(n)
    ieee_v = np.zeros(n, np.float32)
    for g in grads:
        ref_v = ref_v * np.float32(alpha) + tf.square(g) * np.float32(1.0 - alpha)
        ref_theta = ref_theta - np.float32(lr) * g / tf.sqrt(ref_v + np.float32(eps))
        ieee_v = ieee_v * np.float32(alpha) + np.square(g) * np.float32(1.0 - alpha)
        rmsprop_update(theta, g, state, lr=lr, alpha=alpha, epsilon=eps)
    tiny = np.finfo(np.float32).tiny
    assert np.any((ieee_v != 0) & (ieee_v < tiny)), "the case reaches subnormals"
    assert np.array_equal(state.v_shard, ref_v.numpy())
    np.testing.assert_array_equal(theta, ref_theta.numpy())
