"""One shard of the parameters and the paper's aggregation rules, without I/O.

A parameter server (:mod:`dba3c.distributed.ps.server`) and a training rank in collective
aggregation (:mod:`dba3c.distributed.collective.client`) each hold one :class:`ShardServer`;
the messages around it are theirs, the arithmetic is here, and so is the conversion
between a shard and its state message (:class:`~dba3c.distributed.wire.StateMsg`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dba3c.config import Config
from dba3c.distributed.wire import StateMsg
from dba3c.learning.optim import Optimizer, make_optimizer, optimizer_update
from dba3c.learning.rules import OptimizerState


@dataclass(frozen=True)
class Ahead:
    """The update of a shard's tail ``[start:]`` computed ahead of the rest of its step:
    the tail's new parameters and statistics (side copies; ``state.count`` is the shard's
    count after the step)."""

    start: int
    theta: np.ndarray
    state: OptimizerState


@dataclass
class ShardStats:
    """Counters of one shard server."""

    applied: int = 0
    dropped_late: int = 0
    nonfinite_skipped: int = 0
    staleness: list[int] = field(default_factory=list)  # async: versions behind, per apply


class ShardServer:
    """The optimizer on one contiguous shard, with the paper's aggregation rules.

    sync: gradients for step t are those computed at version t; the first ``replicas`` of
    them are averaged and applied (version t -> t+1); later ones for older versions are
    dropped and counted. async: every gradient is applied on arrival; its staleness
    (version now - version it was computed at) is recorded.
    A non-finite mean gradient is not applied: parameters and optimizer state stay as they
    are, the version still advances, and the streak of such skips is counted. The sync sum
    is kept in float64, so the mean (rounded once to float32) does not depend on the order
    in which the workers' gradients arrived. A collective rank may compute its shard's
    tail ahead of the rest of the step (:meth:`update_ahead`, ``dist.gather_ahead``); the
    step's :meth:`offer` then commits it or, skipping the step, drops it.

    ``optimizer`` (:func:`dba3c.learning.optim.make_optimizer`) is the update rule and its schedule;
    the step it sees is the shard's version. ``opt_state`` holds the rule's statistics,
    Adam's or RMSProp's (see :mod:`dba3c.learning.optim`).
    """

    def __init__(self, theta_shard: np.ndarray, opt_state: OptimizerState, version: int, *,
                 mode: str, replicas: int, optimizer: Optimizer):
        self.theta_shard, self.opt_state, self.version = theta_shard, opt_state, version
        self.mode, self.replicas, self.optimizer = mode, replicas, optimizer
        # only a shard that averages several gradients per step needs a running sum
        n = theta_shard.size if mode == "sync" and replicas > 1 else 0
        self._sum, self._mean = np.zeros(n, np.float64), np.empty(n, np.float32)
        self._count = 0
        self._scratch = np.empty((2, theta_shard.size), np.float32)
        self._ahead: Ahead | None = None
        self.nonfinite_streak = 0
        self.stats = ShardStats()

    def offer(self, grad_version: int, g_shard: np.ndarray) -> bool:
        """Hand in a gradient computed at ``grad_version``; True when an update was applied
        (the version advanced)."""
        if self.mode == "async":
            self.stats.staleness.append(self.version - grad_version)
            self._apply(g_shard)
            return True
        if grad_version < self.version:
            self.stats.dropped_late += 1
            return False
        if grad_version > self.version:
            raise RuntimeError(f"gradient for version {grad_version} arrived at a shard at "
                               f"version {self.version}: protocol violated")
        if self.replicas == 1:  # the mean of one gradient is itself: no copy into the sum
            self._apply(g_shard)
            return True
        self._sum += g_shard
        self._count += 1
        if self._count < self.replicas:
            return False
        np.divide(self._sum, self._count, out=self._mean, casting="same_kind")
        self._apply(self._mean)
        self._sum[:] = 0.0
        self._count = 0
        return True

    def update_ahead(self, start: int, g_tail: np.ndarray) -> np.ndarray:
        """Compute step ``version``'s update of the tail ``theta_shard[start:]`` from its part
        of the mean gradient, ``g_tail``, before the rest of the step's gradient is known
        (sync, one gradient a step). The update goes into side copies: the shard still holds
        version ``version`` (a checkpoint or snapshot taken meanwhile sees that) until the
        step's :meth:`offer` commits them, or drops them when the step is skipped. The
        arithmetic is the whole shard's, element for element (the rules are elementwise).
        Returns the tail's new parameters (the side copy: the caller may change it before the
        commit, as the bfloat16 wire rounds it)."""
        if self.mode != "sync" or self.replicas != 1 or self._ahead is not None:
            raise RuntimeError("update_ahead needs a sync shard of one gradient a step, "
                               "once a step")
        state = self.opt_state
        ahead = Ahead(start, self.theta_shard[start:].copy(),
                      OptimizerState(state.m_shard[start:].copy(),
                                     state.v_shard[start:].copy(), state.count))
        if np.isfinite(g_tail).all():  # else the whole step is skipped
            optimizer_update(ahead.theta, g_tail, ahead.state, self.optimizer,
                             step=self.version, scratch=self._scratch[:, start:])
        self._ahead = ahead
        return ahead.theta

    def _apply(self, g_shard: np.ndarray) -> None:
        """The update by the mean ``g_shard``, or the step skipped if it is not finite (a
        tail computed ahead is committed or dropped with the rest)."""
        ahead, self._ahead = self._ahead, None
        self.version += 1
        if not np.isfinite(g_shard).all():
            self.nonfinite_streak += 1
            self.stats.nonfinite_skipped += 1
            return
        self.nonfinite_streak = 0
        self.stats.applied += 1
        state = self.opt_state
        if ahead is None:
            optimizer_update(self.theta_shard, g_shard, state, self.optimizer,
                             step=self.version - 1, scratch=self._scratch)
            return
        head = slice(0, ahead.start)
        optimizer_update(self.theta_shard[head], g_shard[head],
                         OptimizerState(state.m_shard[head], state.v_shard[head], state.count),
                         self.optimizer, step=self.version - 1, scratch=self._scratch[:, head])
        self.theta_shard[ahead.start:] = ahead.theta
        state.m_shard[ahead.start:] = ahead.state.m_shard
        state.v_shard[ahead.start:] = ahead.state.v_shard
        state.count = ahead.state.count


def make_shard(state: StateMsg, cfg: Config, *, mode: str, replicas: int) -> ShardServer:
    """The :class:`ShardServer` a shard state describes, with the configured optimizer."""
    return ShardServer(state.theta_shard.copy(),
                       OptimizerState(state.m_shard.copy(), state.v_shard.copy(), state.opt_count),
                       state.version, mode=mode, replicas=replicas,
                       optimizer=make_optimizer(cfg))


def state_message(shard: ShardServer, final: bool) -> StateMsg:
    """A shard's state (theta, Adam's m and v) as a parameter server sends it to the chief."""
    return StateMsg(shard.version, shard.opt_state.count, final, shard.theta_shard,
                    shard.opt_state.m_shard, shard.opt_state.v_shard)
