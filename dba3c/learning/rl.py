"""The reinforcement-learning math: n-step returns, the A3C loss, gradient clipping,
action selection.

Pure functions, no I/O. Shapes: B = data points in a mini-batch, A = actions, T = rollout
length. Names follow the time index: r_t is the reward after acting at t, v_tp1 the value of
the state at t+1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the loss and clipping import TensorFlow when called; the returns, used
    import tensorflow as tf  # by synthetic-compute workers too, need only NumPy

LOG_EPS = 1e-6  # guard in log(pi + eps), as in the BA3C reference code


def clip_rewards(r_t: np.ndarray, bound: float) -> np.ndarray:
    """Clip rewards to [-bound, bound]; ``bound == 0`` leaves them unchanged."""
    return np.clip(r_t, -bound, bound) if bound > 0 else r_t


def n_step_returns(r_t: np.ndarray, discount_t: np.ndarray, v_T: float) -> np.ndarray:
    """Discounted returns of one rollout, bootstrapped at its end.

        R_T = v_T
        R_t = r_t + discount_t * R_{t+1}

    where discount_t = gamma * (1 - terminal_t) cuts the bootstrap at an episode end, and
    v_T is V(s_T) after the last transition (use 0 when the rollout ends at a terminal).

    Args:
      r_t: float [T] rewards (already clipped if clipping is wanted).
      discount_t: float [T].
      v_T: bootstrap value.
    Returns:
      float32 [T] returns R_0 .. R_{T-1}; the first gets the full n-step horizon, the last
      a 1-step one.
    """
    R_t = np.empty(len(r_t), np.float32)
    acc = np.float64(v_T)
    for t in range(len(r_t) - 1, -1, -1):
        acc = r_t[t] + discount_t[t] * acc
        R_t[t] = acc
    return R_t


def a3c_loss(logits: tf.Tensor, v: tf.Tensor, a: tf.Tensor, R: tf.Tensor, *,
             entropy_beta: float, value_weight: float) -> tuple[tf.Tensor, dict]:
    """Advantage actor-critic loss averaged over a mini-batch.

        pi        = softmax(logits)
        adv       = R - stop_gradient(V(s))
        L_policy  = -mean(log(pi(a|s) + eps) * adv)
        L_value   = mean((R - V(s))^2)
        H         = -mean(sum_a pi log(pi + eps))
        L         = L_policy + value_weight * L_value - entropy_beta * H

    Args:
      logits: float [B, A]; v: float [B]; a: int [B]; R: float [B].
    Returns:
      (L, {"policy": L_policy, "value": L_value, "entropy": H, "advantage": mean adv}).
    """
    import tensorflow as tf

    pi = tf.nn.softmax(logits)
    log_pi = tf.math.log(pi + LOG_EPS)
    log_pi_a = tf.reduce_sum(log_pi * tf.one_hot(a, tf.shape(logits)[-1]), axis=-1)
    adv = R - tf.stop_gradient(v)
    policy = -tf.reduce_mean(log_pi_a * adv)
    value = tf.reduce_mean(tf.square(R - v))
    entropy = -tf.reduce_mean(tf.reduce_sum(pi * log_pi, axis=-1))
    total = policy + value_weight * value - entropy_beta * entropy
    return total, {"policy": policy, "value": value, "entropy": entropy,
                   "advantage": tf.reduce_mean(adv)}


def clip_gradients(grads: list[tf.Tensor], clip: float, mode: str) -> list[tf.Tensor]:
    """Clip gradients; ``clip == 0`` is off.

    average_norm (paper, per tensor):  g <- g * clip / max(||g||_2 / size(g), clip)
    global_norm:                       g <- g * clip / max(||[g_1, ..., g_k]||_2, clip)
    """
    import tensorflow as tf

    if clip <= 0:
        return grads
    if mode == "global_norm":
        return tf.clip_by_global_norm(grads, clip)[0]
    clipped = []
    for g in grads:
        avg_norm = tf.norm(g) / tf.cast(tf.size(g), g.dtype)
        clipped.append(g * clip / tf.maximum(avg_norm, clip))
    return clipped


def sample_actions(pi: np.ndarray, rng: np.random.Generator, greedy: bool = False) -> np.ndarray:
    """One action per row of pi [B, A]: argmax when greedy, else sampled by inverse CDF.

        u ~ U[0, 1)        a = #{j : cumsum(pi)_j <= u}, at most A - 1

    so P(a) = pi_a. A row summing slightly below 1 (float rounding) gives the missing mass
    to the last action rather than an out-of-range index.

    Returns:
      int32 [B].
    """
    if greedy:
        return pi.argmax(axis=1).astype(np.int32)
    u = rng.random((pi.shape[0], 1))
    return np.minimum((u >= np.cumsum(pi, axis=1)).sum(axis=1), pi.shape[1] - 1).astype(np.int32)
