"""The parameter servers' update rule on a flat shard: Adam or RMSProp, at a scheduled rate.

:func:`optimizer_update` is the one call that changes parameters (``core.ShardServer`` makes
it for every shard, in every mode). It picks the learning rate for the global step
(:func:`learning_rate`) and applies :func:`dba3c.learning.rules.adam_update` or
:func:`rmsprop_update`.

Both rules keep their statistics in the same shard state, :class:`dba3c.learning.rules.AdamState`
(two float32 arrays and an update count), so checkpoints and the parameter servers' messages
have one shape whatever the optimizer:

============  =====================================  ==================================
slot          Adam                                   RMSProp
============  =====================================  ==================================
``m_shard``   first moment m                         unused (stays zero)
``v_shard``   second moment v (mean of g^2)          mean square g (mean of g^2)
``count``     updates applied (bias correction)      updates applied
============  =====================================  ==================================

Both rules are elementwise, so updating shards separately and concatenating equals updating
the whole vector; RMSProp's statistics live on the parameter-server shards, shared by every
worker (A3C's "shared RMSProp", its best variant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dba3c.config import AdamConfig, Config, RMSPropConfig
from dba3c.learning.rules import AdamState, adam_update


@dataclass(frozen=True)
class Optimizer:
    """Everything a shard needs to update its parameters.

    kind: ``adam`` or ``rmsprop``; lr: the base learning rate; lr_schedule: ``constant`` or
    ``linear`` (to 0 at ``max_steps``); adam, rmsprop: each rule's own settings.
    """

    kind: str
    lr: float
    lr_schedule: str = "constant"
    max_steps: int = 0
    adam: AdamConfig = field(default_factory=AdamConfig)
    rmsprop: RMSPropConfig = field(default_factory=RMSPropConfig)


def make_optimizer(cfg: Config) -> Optimizer:
    """The configured update rule (``optim.kind``, ``train.lr``, ``train.lr_schedule``)."""
    return Optimizer(cfg.optim.kind, cfg.train.lr, cfg.train.lr_schedule, cfg.train.max_steps,
                     cfg.adam, cfg.rmsprop)


def learning_rate(lr: float, schedule: str, step: int, max_steps: int) -> float:
    """The rate of the update from global step ``step`` to ``step + 1``.

    constant: ``lr``. linear: ``lr * (1 - step / max_steps)``, 0 from ``max_steps`` on (the
    decay of common A3C implementations); the last update, at ``max_steps - 1``, has
    ``lr / max_steps``.
    """
    if schedule == "constant":
        return lr
    if schedule == "linear":
        return lr * max(0.0, 1.0 - step / max_steps)
    raise ValueError(f"unknown learning-rate schedule {schedule!r}")


def rmsprop_update(theta_shard: np.ndarray, g_shard: np.ndarray, state: AdamState, *,
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
    result is bit-identical to evaluating the formulas with float32 temporaries.

    Args:
      theta_shard: float32 [n], updated in place.
      g_shard: float32 [n], the (averaged) gradient dtheta.
      state: the shard's statistics; ``v_shard`` (the mean square) is updated in place,
        ``m_shard`` is not used, ``count`` is incremented.
      scratch: float32 [2, n] work space reused across calls (allocated when None).
    """
    v = state.v_shard
    a, b = np.empty((2, v.size), np.float32) if scratch is None else scratch
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


def optimizer_update(theta_shard: np.ndarray, g_shard: np.ndarray, state: AdamState,
                     optimizer: Optimizer, *, step: int,
                     scratch: np.ndarray | None = None) -> None:
    """Apply ``optimizer`` to one shard in place, as the update from global step ``step``.

    Args:
      theta_shard: float32 [n], updated in place.
      g_shard: float32 [n], the (averaged) gradient.
      state: the shard's statistics (see the module docstring), updated in place.
      optimizer: the rule, its settings and the learning-rate schedule.
      step: the global step the update starts from (the shard's version).
      scratch: float32 [2, n] work space reused across calls (allocated when None).
    """
    lr = learning_rate(optimizer.lr, optimizer.lr_schedule, step, optimizer.max_steps)
    if optimizer.kind == "adam":
        a = optimizer.adam
        adam_update(theta_shard, g_shard, state, lr=lr, beta1=a.beta1, beta2=a.beta2,
                    epsilon=a.epsilon, scratch=scratch)
    elif optimizer.kind == "rmsprop":
        r = optimizer.rmsprop
        rmsprop_update(theta_shard, g_shard, state, lr=lr, alpha=r.alpha, epsilon=r.epsilon,
                       scratch=scratch)
    else:
        raise ValueError(f"unknown optimizer kind {optimizer.kind!r}")
