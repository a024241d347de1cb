"""The small interfaces every piece depends on; their implementations live where they belong.

- :class:`Params`: a version of the flat parameter vector.
- :class:`Evaluation`: the games played with one version, and its active units.
- :class:`Step`: what the simulators return for one batch of envs, and the rollouts read.
- :class:`ParameterClient`: what a worker's trainer talks to: ``pull`` the first parameters,
  ``push`` a gradient and get the parameters to train on next (None when the run ends).
  ``distributed.single.LocalParameterServer`` serves one process,
  ``distributed.ps.client.RemoteParameterClient`` talks to parameter-server ranks; tests drop
  in either.
- :class:`WorkersClient`: a store that takes the gradients of several emulated workers a step.
- :class:`StagedClient` and :class:`Incoming`: a parameter store that takes the gradient and
  hands out the next parameters bucket by bucket
  (``distributed.collective.client.CollectiveClient``).
- :class:`Transport`, :class:`Request`, :class:`Collectives`: messaging between ranks
  (``distributed.transport``: MPI, and threads in one process for tests); with them
  :data:`ANY_SOURCE`, :class:`Completed` (a request complete when started) and
  :func:`offsets` (where a collective's contiguous parts start).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class Params:
    """Parameters theta [N] at ``version`` (global steps applied).

    nonfinite_streak: consecutive updates skipped because the gradient was not finite.
    """

    version: int
    theta: np.ndarray
    nonfinite_streak: int = 0


@dataclass(frozen=True)
class Evaluation:
    """An evaluation of the parameters at ``step``: each game's score (in the order the
    games ended) and, for each trunk layer in order, how many of its units were active on the
    evaluator's probe frames (``eval.probe_frames``; empty when not counted)."""

    step: int
    scores: tuple[float, ...]
    active_units: tuple[int, ...] = ()


@dataclass
class Step:
    """What a pool of simulators returns for one batch of its envs (``games.envs.EnvPool``
    ``reset``/``recv``), which the rollouts turn into data points (``learning.rollout``).
    B = envs in the batch.

    obs [B, ...] (uint8 for Atari); r_t, terminated, truncated [B]; env_ids [B] int;
    lives [B] int (1 where the game has no lives).
    """

    obs: np.ndarray
    r_t: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    env_ids: np.ndarray
    lives: np.ndarray


class ParameterClient(Protocol):
    """A worker's view of the parameter store."""

    def pull(self) -> Params:
        """The parameters to start from."""

    def push(self, version: int, grad: np.ndarray) -> Params | None:
        """Send a gradient computed at ``version``; return the newest complete parameters
        to train on next, or None when the run is over."""


@runtime_checkable
class WorkersClient(ParameterClient, Protocol):
    """A parameter store that takes several workers' gradients a step
    (``distributed.single.LocalParameterServer`` of W emulated workers,
    ``dist.emulate_workers``): ``offer`` each of them but the last, ``push`` the last."""

    def offer(self, version: int, grad: np.ndarray) -> None:
        """One worker's gradient computed at ``version``, not the step's last."""


class Incoming(Protocol):
    """The parameters of the next version, arriving bucket by bucket
    (:class:`StagedClient`)."""

    version: int
    nonfinite_streak: int

    def wait(self, bucket: int) -> np.ndarray:
        """Bucket ``bucket`` of theta (flat, float32), once it has arrived."""

    def params(self) -> Params:
        """Every bucket, once all have arrived."""

    def arrived(self) -> bool:
        """Whether every bucket has arrived (not waiting)."""


class StagedClient(ParameterClient, Protocol):
    """A parameter store that takes a gradient bucket by bucket (``dba3c.learning.params.ShardPlan``
    buckets, offered as the backward pass makes them: the last bucket first) and hands the
    next parameters out bucket by bucket (bucket 0 first), so communication overlaps the
    backward pass and the next forward pass (``dist.aggregation: collective``)."""

    num_buckets: int
    busy: threading.Event
    """Set while communication is in flight (what :meth:`progress` advances)."""
    gathering_ahead: bool
    """Whether the last bucket's update and its way back start before the rest of the step
    (``dist.gather_ahead``); set between steps."""

    def offer(self, version: int, bucket: int, grad_bucket: np.ndarray) -> None:
        """Bucket ``bucket`` of the gradient computed at ``version``; keep ``grad_bucket``
        unchanged until :meth:`finish` returned."""

    def progress(self) -> None:
        """Let communication in flight advance (called often, from a helper thread, while
        :attr:`busy`); clears :attr:`busy` once nothing is in flight."""

    def finish(self) -> Incoming | None:
        """Once every bucket was offered: the step applied, the next parameters on their
        way (None when the run is over for this rank)."""

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Every training rank's ``values`` (float64 [k], the same k on every rank), rank by
        rank: [ranks, k]. Collective: every rank calls it at the same point, between steps."""

    @property
    def stopping(self) -> bool:
        """The step :meth:`finish` returned is the last one."""


def parameters_loaded(bucket: int) -> None:
    """The ``before_forward`` of a staged gradient whose parameters are all loaded already
    (:meth:`dba3c.learning.learner.Learner.staged_gradient` then runs a forward pass that
    calls no Python): there is nothing to wait for."""


class Request(Protocol):
    """A pending send or receive."""

    def test(self) -> bool:
        """True once the operation has completed (the buffer may then be reused)."""


class Completed:
    """The :class:`Request` of an operation complete when started (an in-process send; a
    collective there was no need to make)."""

    def test(self) -> bool:
        """Always complete."""
        return True


ANY_SOURCE = -1  # Transport.irecv from whichever rank sends first


class Transport(Protocol):
    """A world of ``size`` ranks; this is rank ``rank``; ``hosts[r]`` is the name of the host
    rank r runs on (an MPI world gathers them once, at start-up: ``gather_hosts``)."""

    rank: int
    size: int

    @property
    def hosts(self) -> Sequence[str]:
        """Every rank's host name, by rank."""

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Request:
        """Start sending ``buf`` (keep it unchanged until the request completes)."""

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Request:
        """Start receiving into ``buf`` from ``source`` (or ANY_SOURCE)."""

    def abort(self, code: int) -> None:
        """End the whole world now with a non-zero exit code."""

    def split(self, member: bool) -> Collectives | None:
        """Called by every rank of the world at the same point: the group of the ranks that
        pass ``member`` (in world-rank order), or None for the others."""


class Collectives(Protocol):
    """Nonblocking collectives on a group of ``size`` ranks; this is group rank ``rank``.

    Every member starts the same operations in the same order; ``counts[r]`` is group rank
    r's part of a vector split in contiguous parts. Keep the buffers unchanged (send) and
    unread (receive) until the request completes. Sums take float32, int64 or bfloat16
    (``ml_dtypes.bfloat16``) vectors; bfloat16 ones are added two at a time in float32, each
    sum rounded to bfloat16.
    """

    rank: int
    size: int

    def ireduce_scatter(self, send: np.ndarray, recv: np.ndarray,
                        counts: Sequence[int]) -> Request:
        """recv [counts[rank]] = this rank's part of the elementwise sum of every send."""

    def iallreduce(self, send: np.ndarray, recv: np.ndarray) -> Request:
        """recv = the elementwise sum of every member's send (same shape)."""

    def iallgather(self, send: np.ndarray, recv: np.ndarray,
                   counts: Sequence[int]) -> Request:
        """recv [sum(counts)] = every member's send [counts[r]], in group-rank order."""

    def duplicate(self) -> Collectives:
        """The same members as a group of their own, whose operations need no order with
        this group's (``MPI_Comm_dup``; every member calls it at the same point)."""


def offsets(counts: Sequence[int]) -> list[int]:
    """Where each contiguous part of lengths ``counts`` starts (a collective's parts)."""
    return [int(x) for x in np.cumsum([0, *counts[:-1]])]
