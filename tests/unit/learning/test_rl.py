"""n-step returns, reward clipping, the A3C loss, gradient clipping and action sampling
(dba3c.learning.rl).

Expected values are derived by hand (in comments) or recomputed with plain NumPy.
"""

from typing import cast

import numpy as np
import pytest
import tensorflow as tf

from dba3c.learning.rl import (
    LOG_EPS,
    a3c_loss,
    clip_gradients,
    clip_rewards,
    n_step_returns,
    sample_actions,
)

# --------------------------------------------------------------------------- n-step returns

def test_n_step_returns_no_terminal_bootstraps_with_v_T():
    r_t = np.array([1.0, 2.0, 3.0])
    discount_t = np.full(3, 0.9)
    # R_2 = 3 + .9 * 10    = 12
    # R_1 = 2 + .9 * 12    = 12.8
    # R_0 = 1 + .9 * 12.8  = 12.52
    R = n_step_returns(r_t, discount_t, 10.0)
    assert R.dtype == np.float32
    np.testing.assert_allclose(R, [12.52, 12.8, 12.0], rtol=1e-6)


def test_n_step_returns_terminal_in_the_middle_cuts_bootstrap():
    r_t = np.array([1.0, 2.0, 3.0])
    discount_t = np.array([0.9, 0.0, 0.9])  # episode ends after the transition at t=1
    # R_2 = 3 + .9 * 10 = 12     (next episode, bootstrapped)
    # R_1 = 2 + 0 * 12  = 2      (terminal: nothing beyond it)
    # R_0 = 1 + .9 * 2  = 2.8
    R = n_step_returns(r_t, discount_t, 10.0)
    np.testing.assert_allclose(R, [2.8, 2.0, 12.0], rtol=1e-6)


def test_n_step_returns_terminal_at_end_with_zero_bootstrap():
    # gamma .5, v_T = 0: R_2 = 4, R_1 = 2 + 2 = 4, R_0 = 0 + 2 = 2
    R = n_step_returns(np.array([0.0, 2.0, 4.0]), np.array([0.5, 0.5, 0.0]), 0.0)
    np.testing.assert_allclose(R, [2.0, 4.0, 4.0], rtol=1e-6)


def test_n_step_returns_single_step_and_empty():
    np.testing.assert_allclose(n_step_returns(np.array([1.5]), np.array([0.99]), 2.0),
                               [1.5 + 0.99 * 2.0], rtol=1e-6)
    assert n_step_returns(np.array([]), np.array([]), 3.0).shape == (0,)


def test_clip_rewards_then_returns():
    r = np.array([5.0, -3.0, 0.5])
    clipped = clip_rewards(r, 1.0)
    np.testing.assert_array_equal(clipped, [1.0, -1.0, 0.5])
    np.testing.assert_array_equal(r, [5.0, -3.0, 0.5])  # input untouched
    # gamma .5, v_T = 0: R_2 = .5, R_1 = -1 + .25 = -.75, R_0 = 1 - .375 = .625
    R = n_step_returns(clipped, np.full(3, 0.5), 0.0)
    np.testing.assert_allclose(R, [0.625, -0.75, 0.5], rtol=1e-6)


def test_clip_rewards_zero_bound_is_off():
    r = np.array([5.0, -3.0, 0.5])
    np.testing.assert_array_equal(clip_rewards(r, 0.0), r)


# --------------------------------------------------------------------------- A3C loss

# Two states, two actions. Row 0 has logits (0, ln 3) -> pi = (1/4, 3/4); row 1 has equal
# logits -> pi = (1/2, 1/2).
LOGITS = np.array([[0.0, np.log(3.0)], [0.0, 0.0]], np.float32)
V = np.array([0.5, -1.0], np.float32)
A = np.array([1, 0], np.int32)
R = np.array([2.0, 0.5], np.float32)
BETA, VALUE_W = 0.01, 0.5


def _reference_loss():
    pi = np.array([[0.25, 0.75], [0.5, 0.5]])
    log_pi = np.log(pi + 1e-6)
    adv = R.astype(np.float64) - V  # (1.5, 1.5)
    policy = -np.mean(log_pi[[0, 1], A] * adv)  # -(ln .75 + ln .5) * 1.5 / 2 ~= 0.7356
    value = np.mean((R - V.astype(np.float64)) ** 2)  # (1.5^2 + 1.5^2) / 2 = 2.25
    entropy = -np.mean(np.sum(pi * log_pi, axis=1))  # (0.5623 + 0.6931) / 2 ~= 0.6277
    total = policy + VALUE_W * value - BETA * entropy
    return total, policy, value, entropy, np.mean(adv)


def test_a3c_loss_matches_hand_computation():
    total, policy, value, entropy, adv = _reference_loss()
    # sanity of the reference itself (LOG_EPS barely moves these)
    assert value == pytest.approx(2.25)
    assert policy == pytest.approx(-(np.log(0.75) + np.log(0.5)) * 1.5 / 2, abs=1e-5)
    assert entropy == pytest.approx((-(0.25 * np.log(.25) + .75 * np.log(.75)) + np.log(2)) / 2,
                                    abs=1e-5)
    L, parts = a3c_loss(tf.constant(LOGITS), tf.constant(V), tf.constant(A), tf.constant(R),
                        entropy_beta=BETA, value_weight=VALUE_W)
    assert float(L) == pytest.approx(total, abs=1e-5)
    assert float(parts["policy"]) == pytest.approx(policy, abs=1e-5)
    assert float(parts["value"]) == pytest.approx(value, abs=1e-5)
    assert float(parts["entropy"]) == pytest.approx(entropy, abs=1e-5)
    assert float(parts["advantage"]) == pytest.approx(adv, abs=1e-6)


def test_a3c_loss_uses_log_eps_guard():
    # A one-hot policy: log(0 + 1e-6) stays finite; the chosen-but-impossible action gives
    # policy = -log(1e-6) * adv.
    logits = tf.constant([[0.0, -200.0]])
    L, parts = a3c_loss(logits, tf.constant([0.0]), tf.constant([1]), tf.constant([1.0]),
                        entropy_beta=0.0, value_weight=0.0)
    assert LOG_EPS == 1e-6
    assert np.isfinite(float(L))
    assert float(parts["policy"]) == pytest.approx(-np.log(1e-6), rel=1e-5)


def _grads(term, wrt):
    logits, v = tf.constant(LOGITS), tf.constant(V)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([logits, v])
        L, parts = a3c_loss(logits, v, tf.constant(A), tf.constant(R),
                            entropy_beta=BETA, value_weight=VALUE_W)
        y = L if term == "total" else parts[term]
    x = logits if wrt == "logits" else v
    return tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO).numpy()


def test_value_term_has_no_gradient_wrt_logits():
    np.testing.assert_array_equal(_grads("value", "logits"), np.zeros_like(LOGITS))


def test_policy_term_has_no_gradient_wrt_values():
    # adv = R - stop_gradient(V): the policy loss must not train the critic
    np.testing.assert_array_equal(_grads("policy", "v"), np.zeros_like(V))


def test_total_gradient_wrt_values_is_value_weight_times_mse_gradient():
    # d/dV [w * mean((R - V)^2)] = w * 2 (V - R) / B = .5 * 2 * (-1.5) / 2 = -0.75 each
    np.testing.assert_allclose(_grads("total", "v"), [-0.75, -0.75], rtol=1e-6)


def test_policy_gradient_wrt_logits_matches_analytic_formula():
    # L_policy = -1/B sum_b adv_b log(pi_b[a_b] + eps)
    # d/dz_bj = -adv_b / B * pi_b[a_b] / (pi_b[a_b] + eps) * (onehot_bj - pi_bj)
    pi = np.array([[0.25, 0.75], [0.5, 0.5]])
    onehot = np.eye(2)[A]
    pa = pi[[0, 1], A]
    adv = (R - V)[:, None]
    expected = -adv / 2 * (pa / (pa + 1e-6))[:, None] * (onehot - pi)
    np.testing.assert_allclose(_grads("policy", "logits"), expected, atol=1e-6)


# --------------------------------------------------------------------------- clipping

def test_average_norm_clips_large_tensor_to_clip():
    # g = (3, 4): ||g|| = 5, size 2 -> average norm 2.5 > 0.1 -> scale 0.1 / 2.5 = 0.04
    big = tf.constant([3.0, 4.0])
    (out,) = clip_gradients([big], 0.1, "average_norm")
    np.testing.assert_allclose(out.numpy(), [0.12, 0.16], rtol=1e-6)
    assert float(tf.norm(out)) / 2 == pytest.approx(0.1, rel=1e-6)


def test_average_norm_leaves_small_tensor_and_clips_per_tensor():
    # small: ||(0.01, 0, 0)|| / 3 = 0.00333 < 0.1 -> unchanged, even next to a big tensor
    small = tf.constant([0.01, 0.0, 0.0])
    big = tf.constant([[3.0, 4.0]])
    out_big, out_small = clip_gradients([big, small], 0.1, "average_norm")
    np.testing.assert_allclose(out_small.numpy(), small.numpy(), rtol=1e-7)
    np.testing.assert_allclose(out_big.numpy(), [[0.12, 0.16]], rtol=1e-6)


def test_average_norm_at_exactly_clip_is_unchanged():
    # (0.3, 0.4): norm .5, size 5 (padded with zeros) -> average .1 == clip
    g = tf.constant([0.3, 0.4, 0.0, 0.0, 0.0])
    (out,) = clip_gradients([g], 0.1, "average_norm")
    np.testing.assert_allclose(out.numpy(), g.numpy(), rtol=1e-6)


def test_global_norm_matches_tf_and_hand():
    a, b = tf.constant([3.0, 4.0]), tf.constant([[12.0]])
    # global norm sqrt(9 + 16 + 144) = 13 -> scale 1 / 13
    out = clip_gradients([a, b], 1.0, "global_norm")
    ref, _ = tf.clip_by_global_norm([a, b], 1.0)
    for o, r in zip(out, ref):
        np.testing.assert_allclose(o.numpy(), r.numpy(), rtol=1e-7)
    np.testing.assert_allclose(out[0].numpy(), [3 / 13, 4 / 13], rtol=1e-6)
    np.testing.assert_allclose(out[1].numpy(), [[12 / 13]], rtol=1e-6)
    # below the threshold: unchanged
    out = clip_gradients([a, b], 20.0, "global_norm")
    np.testing.assert_allclose(out[0].numpy(), a.numpy(), rtol=1e-7)


@pytest.mark.parametrize("mode", ["average_norm", "global_norm"])
def test_clip_zero_is_identity(mode):
    grads = [tf.constant([300.0, 400.0]), tf.constant([1e6])]
    out = clip_gradients(grads, 0.0, mode)
    for o, g in zip(out, grads):
        np.testing.assert_array_equal(o.numpy(), g.numpy())


# --------------------------------------------------------------------------- action sampling

class FixedUniform:
    """Stands in for a NumPy Generator whose ``random`` always draws ``u``: probes the
    inverse CDF at its edges."""

    def __init__(self, u: float):
        self.u = u

    def random(self, shape) -> np.ndarray:
        return np.full(shape, self.u)

    def as_generator(self) -> np.random.Generator:
        """This fake where a Generator is asked for: sample_actions only calls ``random``."""
        return cast(np.random.Generator, self)


def test_greedy_actions_are_the_argmax_of_each_row():
    pi = np.array([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3], [0.2, 0.3, 0.5]], np.float32)
    a = sample_actions(pi, np.random.default_rng(0), greedy=True)
    assert a.dtype == np.int32
    assert a.tolist() == [1, 0, 2]


def test_sampled_action_frequencies_match_pi():
    n = 40_000  # draws per distribution
    rows = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.0, 0.05, 0.25]], np.float32)
    pi = np.tile(rows, (n, 1))  # the two distributions alternate row by row
    a = sample_actions(pi, np.random.default_rng(1234))
    assert a.dtype == np.int32 and a.shape == (2 * n,)
    for i, p in enumerate(rows.astype(np.float64)):
        freq = np.bincount(a[i::2], minlength=4) / n
        # a count of action j is Binomial(n, p_j): standard deviation sqrt(p_j (1 - p_j) / n)
        # as a frequency (0.0023 at p = .4); allow 4 of them. p_j = 0 must never be drawn.
        np.testing.assert_array_less(np.abs(freq - p), 4 * np.sqrt(p * (1 - p) / n) + 1e-12)


def test_rows_summing_slightly_below_one_stay_in_range():
    pi = np.array([[0.3, 0.3, 0.3999], [0.25, 0.25, 0.49]], np.float32)  # sums .9999, .99
    top = np.nextafter(1.0, 0.0)  # the largest u a Generator can draw
    # every cumulative sum is below u: the missing mass goes to the last action, not to A
    assert sample_actions(pi, FixedUniform(top).as_generator()).tolist() == [2, 2]
    a = sample_actions(np.repeat(pi, 50_000, axis=0), np.random.default_rng(0))
    assert a.min() >= 0 and a.max() <= 2


def test_u_zero_never_draws_a_zero_probability_action():
    # a = #{j : cumsum_j <= u}: at u = 0 the leading zero-probability actions are skipped
    pi = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]], np.float32)
    assert sample_actions(pi, FixedUniform(0.0).as_generator()).tolist() == [1, 2, 0]
