"""The update rules on a flat parameter shard: Adam and RMSProp, pure NumPy functions.

Each shard server owns a contiguous slice of the flat parameter vector and the matching
slices of the rule's statistics (:class:`OptimizerState`). Both rules are elementwise, so
updating shards separately and concatenating equals updating the whole vector.
:func:`dba3c.learning.optim.optimizer_update` picks the rule and the rate.

Their arithmetic runs with subnormal numbers flushed to zero in the calling thread
(:func:`dba3c.learning.fpenv.subnormals_flushed`), as TensorFlow's kernels compute: a dead
unit's moments shrink into that range, where each IEEE operation costs many times a normal one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dba3c.learning.fpenv import subnormals_flushed


@dataclass
class OptimizerState:
    """An update rule's statistics for one shard, and the number of updates applied so far.

    m_shard, v_shard: float32 [n]. count: updates applied (Keras' ``iterations``).
    Adam keeps its first and second moments in them; RMSProp its mean square in ``v_shard``,
    ``m_shard`` unused (:mod:`dba3c.learning.optim`).
    """

    m_shard: np.ndarray
    v_shard: np.ndarray
    count: int = 0

    @classmethod
    def zeros(cls, n: int) -> OptimizerState:
        """Fresh state for a shard of ``n`` parameters."""
        return cls(np.zeros(n, np.float32), np.zeros(n, np.float32), 0)


def adam_update(theta_shard: np.ndarray, g_shard: np.ndarray, state: OptimizerState, *,
                lr: float, beta1: float, beta2: float, epsilon: float,
                scratch: np.ndarray | None = None) -> None:
    """One Adam step in place, as ``tf.keras.optimizers.Adam`` computes it.

    With t = count + 1:
        alpha_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
        m_t     = m_{t-1} + (g - m_{t-1}) * (1 - beta1)
        v_t     = v_{t-1} + (g^2 - v_{t-1}) * (1 - beta2)
        theta_t = theta_{t-1} - alpha_t * m_t / (sqrt(v_t) + epsilon)

    Every operation writes into ``scratch`` or the state, in the order written above, so
    the result is bit-identical to evaluating the formulas with temporaries. Subnormal
    numbers are flushed to zero, as in TensorFlow's kernels (:mod:`dba3c.learning.fpenv`).

    Args:
      theta_shard: float32 [n], updated in place.
      g_shard: float32 [n], the (averaged) gradient.
      state: the shard's moments, updated in place; ``count`` is incremented.
      scratch: float32 [2, n] work space reused across calls (allocated when None).
    """
    t = state.count + 1
    alpha_t = np.float32(lr * np.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t))
    m, v = state.m_shard, state.v_shard
    a, b = np.empty((2, m.size), np.float32) if scratch is None else scratch
    with subnormals_flushed():
        np.subtract(g_shard, m, out=a)
        a *= np.float32(1.0 - beta1)
        m += a
        np.square(g_shard, out=a)
        a -= v
        a *= np.float32(1.0 - beta2)
        v += a
        np.sqrt(v, out=b)
        b += np.float32(epsilon)
        np.multiply(alpha_t, m, out=a)
        a /= b
        theta_shard -= a
    state.count = t


def rmsprop_update(theta_shard: np.ndarray, g_shard: np.ndarray, state: OptimizerState, *,
                   lr: float, alpha: float, epsilon: float,
                   scratch: np.ndarray | None = None) -> None:
    """One non-centered RMSProp step in place, as A3C and PAAC define it:

        g_t     = alpha * g_{t-1} + (1 - alpha) * dtheta^2       (state.v_shard; starts at 0)
        theta_t = theta_{t-1} - (lr * dtheta) / sqrt(g_t + epsilon)

    epsilon sits INSIDE the square root, as in the A3C/PAAC papers, TF1's
    ``RMSPropOptimizer`` and Keras 3's ``tf.keras.optimizers.RMSprop`` (``rho`` = alpha,
    ``momentum=0``, ``centered=False``); PyTorch and Keras 2 add it OUTSIDE,
    ``/ (sqrt(g_t) + epsilon)``, which agrees only as epsilon -> 0 (with PAAC's 0.1 the step
    differs a lot while g_t is small). TF1 started the mean square at 1; here it starts at 0,
    like Keras and PyTorch. No momentum.
    Every operation writes into ``scratch`` or the state in the order written above, so the
    result is bit-identical to evaluating the formulas with float32 temporaries. Subnormal
    numbers are flushed to zero, as in TensorFlow's kernels (:mod:`dba3c.learning.fpenv`).

    Args:
      theta_shard: float32 [n], updated in place.
      g_shard: float32 [n], the (averaged) gradient dtheta.
      state: the shard's statistics; ``v_shard`` (the mean square) is updated in place,
        ``m_shard`` is not used, ``count`` is incremented.
      scratch: float32 [2, n] work space reused across calls (allocated when None).
    """
    v = state.v_shard
    a, b = np.empty((2, v.size), np.float32) if scratch is None else scratch
    with subnormals_flushed():
        v *= np.float32(alpha)
        np.square(g_shard, out=a)
        a *= np.float32(1.0 - alpha)
        v += a
        np.add(v, np.float32(epsilon), out=b)
        np.sqrt(b, out=b)
        np.multiply(np.float32(lr), g_shard, out=a)
        a /= b
        theta_shard -= a
    state.count += 1
