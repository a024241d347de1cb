"""The parameter servers' update rule on a flat shard: Adam or RMSProp, at a scheduled rate.

:func:`optimizer_update` is the one call that changes parameters (every shard server and the
single-process store make it through :class:`dba3c.distributed.shard.ShardServer`, which skips
a non-finite gradient). It picks the learning rate for the global step
(:func:`learning_rate`) and applies :func:`dba3c.learning.rules.adam_update` or
:func:`rmsprop_update`.

Both rules keep their statistics in the same shard state,
:class:`dba3c.learning.rules.OptimizerState`
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
from dba3c.learning.rules import OptimizerState, adam_update, rmsprop_update


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


def optimizer_update(theta_shard: np.ndarray, g_shard: np.ndarray, state: OptimizerState,
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
