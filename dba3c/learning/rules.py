"""Adam on a flat parameter shard: a pure NumPy function, the TensorFlow/Keras formula.

Each parameter server owns a contiguous slice of the flat parameter vector and the matching
slices of Adam's moments. Adam is elementwise, so updating shards separately and concatenating
equals updating the whole vector; :func:`adam_update` is all a shard needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class AdamState:
    """Adam's moments for one shard and the number of updates applied so far.

    m_shard, v_shard: float32 [n]. count: updates applied (Keras' ``iterations``).
    RMSProp uses the same state: its mean square in ``v_shard``, ``m_shard`` unused
    (:mod:`dba3c.learning.optim`).
    """

    m_shard: np.ndarray
    v_shard: np.ndarray
    count: int = 0

    @classmethod
    def zeros(cls, n: int) -> AdamState:
        """Fresh state for a shard of ``n`` parameters."""
        return cls(np.zeros(n, np.float32), np.zeros(n, np.float32), 0)


def adam_update(theta_shard: np.ndarray, g_shard: np.ndarray, state: AdamState, *,
                lr: float, beta1: float, beta2: float, epsilon: float,
                scratch: np.ndarray | None = None) -> None:
    """One Adam step in place, as ``tf.keras.optimizers.Adam`` computes it.

    With t = count + 1:
        alpha_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
        m_t     = m_{t-1} + (g - m_{t-1}) * (1 - beta1)
        v_t     = v_{t-1} + (g^2 - v_{t-1}) * (1 - beta2)
        theta_t = theta_{t-1} - alpha_t * m_t / (sqrt(v_t) + epsilon)

    Every operation writes into ``scratch`` or the state, in the order written above, so
    the result is bit-identical to evaluating the formulas with temporaries.

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
