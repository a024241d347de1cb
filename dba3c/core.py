"""The small interfaces every piece depends on, and the parameter-server logic without I/O.

- :class:`Params`: a version of the flat parameter vector.
- :class:`ParameterClient`: what a worker's trainer talks to: ``pull`` the first parameters,
  ``push`` a gradient and get the parameters to train on next (None when the run ends).
  :class:`LocalParameterServer` serves one process; ``dist.worker_client.RemoteParameterClient``
  talks to parameter-server ranks. Tests drop in either.
- :class:`ShardServer`: one shard's optimizer and the aggregation rule, used by both; its
  :meth:`~ShardServer._apply` is the one place parameters change
  (:func:`dba3c.learning.optim.optimizer_update`).
- :class:`EvalSchedule`: which global steps are evaluated; the one place that decides and
  submits, whether the evaluator is a thread of this process or its own rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from dba3c.learning.optim import Optimizer, optimizer_update
from dba3c.learning.rules import AdamState


@dataclass
class Params:
    """Parameters theta [N] at ``version`` (global steps applied).

    nonfinite_streak: consecutive updates skipped because the gradient was not finite.
    """

    version: int
    theta: np.ndarray
    nonfinite_streak: int = 0


class ParameterClient(Protocol):
    """A worker's view of the parameter store."""

    def pull(self) -> Params:
        """The parameters to start from."""

    def push(self, version: int, grad: np.ndarray) -> Params | None:
        """Send a gradient computed at ``version``; return the newest complete parameters
        to train on next, or None when the run is over."""


class Incoming(Protocol):
    """The parameters of the next version, arriving bucket by bucket
    (:class:`StagedClient`)."""

    version: int
    nonfinite_streak: int

    def wait(self, bucket: int) -> np.ndarray:
        """Bucket ``bucket`` of theta (flat, float32), once it has arrived."""

    def params(self) -> Params:
        """Every bucket, once all have arrived."""


class StagedClient(ParameterClient, Protocol):
    """A parameter store that takes a gradient bucket by bucket (``dba3c.learning.params.ShardPlan``
    buckets, offered as the backward pass makes them: the last bucket first) and hands the
    next parameters out bucket by bucket (bucket 0 first), so communication overlaps the
    backward pass and the next forward pass (``dist.aggregation: collective``)."""

    num_buckets: int

    def offer(self, version: int, bucket: int, grad_bucket: np.ndarray) -> None:
        """Bucket ``bucket`` of the gradient computed at ``version``; keep ``grad_bucket``
        unchanged until :meth:`finish` returned."""

    def progress(self) -> None:
        """Let communication in flight advance (called often, from a helper thread)."""

    def finish(self) -> Incoming | None:
        """Once every bucket was offered: the step applied, the next parameters on their
        way (None when the run is over for this rank)."""

    @property
    def stopping(self) -> bool:
        """The step :meth:`finish` returned is the last one."""


class EvalSchedule:
    """Every ``every`` global steps (never when 0) the parameters at that step go to
    ``submit(step, theta)``: to an in-process evaluator, or as a snapshot to the evaluator
    rank (a parameter server submits its shard)."""

    def __init__(self, every: int, submit: Callable[[int, np.ndarray], None]):
        self.every, self.submit = every, submit

    def after_step(self, step: int, theta: np.ndarray) -> None:
        """Submit ``theta`` if ``step`` is due for evaluation."""
        if self.every and step % self.every == 0:
            self.submit(step, theta)


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
    in which the workers' gradients arrived.

    ``optimizer`` (:func:`dba3c.learning.optim.make_optimizer`) is the update rule and its schedule;
    the step it sees is the shard's version. ``adam`` holds the optimizer's statistics,
    Adam's or RMSProp's (see :mod:`dba3c.learning.optim`).
    """

    def __init__(self, theta_shard: np.ndarray, adam: AdamState, version: int, *,
                 mode: str, replicas: int, optimizer: Optimizer):
        self.theta_shard, self.adam, self.version = theta_shard, adam, version
        self.mode, self.replicas, self.optimizer = mode, replicas, optimizer
        # only a shard that averages several gradients per step needs a running sum
        n = theta_shard.size if mode == "sync" and replicas > 1 else 0
        self._sum, self._mean = np.zeros(n, np.float64), np.empty(n, np.float32)
        self._count = 0
        self._scratch = np.empty((2, theta_shard.size), np.float32)
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

    def _apply(self, g_shard: np.ndarray) -> None:
        if np.isfinite(g_shard).all():
            optimizer_update(self.theta_shard, g_shard, self.adam, self.optimizer,
                             step=self.version, scratch=self._scratch)
            self.nonfinite_streak = 0
            self.stats.applied += 1
        else:
            self.nonfinite_streak += 1
            self.stats.nonfinite_skipped += 1
        self.version += 1


class LocalParameterServer:
    """The whole parameter vector in this process: the single-node trainer's store."""

    def __init__(self, theta: np.ndarray, state: AdamState, version: int,
                 optimizer: Optimizer):
        self.shard = ShardServer(theta, state, version, mode="sync", replicas=1,
                                 optimizer=optimizer)

    def pull(self) -> Params:
        """The current parameters."""
        return Params(self.shard.version, self.shard.theta_shard.copy())

    def push(self, version: int, grad: np.ndarray) -> Params:
        """Apply the optimizer to ``grad`` and return the next parameters."""
        self.shard.offer(version, grad)
        return Params(self.shard.version, self.shard.theta_shard.copy(),
                      self.shard.nonfinite_streak)
