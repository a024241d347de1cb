"""Fault injection for tests (the ``debug.*`` keys), chosen once when a worker starts.

:func:`with_faults` wraps a worker's gradient step in the faults its config asks of this rank:
a slow rank, a rank that fails at a step, non-finite gradients for a few steps. Without such a
key the step comes back unchanged, so real training tests nothing for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from dba3c.config import DebugConfig
from dba3c.learning.rollout import Batch

GradientStep = Callable[[Batch, int], tuple[np.ndarray, dict]]
"""(mini-batch, parameter version) -> (flat gradient, losses)."""
S = TypeVar("S")
R = TypeVar("R")


def with_faults(debug: DebugConfig, rank: int, step: GradientStep) -> GradientStep:
    """``step`` wrapped in each fault that ``debug`` injects on ``rank``, in the order they
    strike: sleep (``slow_rank``), raise (``fail_rank``), then the gradient made non-finite
    (``nan_at_step``, every rank)."""
    if debug.nan_at_step >= 0:
        step = _non_finite(step, debug)
    return with_rank_faults(debug, rank, step)


def with_rank_faults(debug: DebugConfig, rank: int,
                     step: Callable[[S, int], R]) -> Callable[[S, int], R]:
    """``step`` (any (input, parameter version) -> result) wrapped in the faults of this rank
    alone: sleep (``slow_rank``), then raise (``fail_rank``). A staged gradient step takes
    these; its buckets are made non-finite where they leave (:func:`non_finite_due`)."""
    if debug.fail_rank == rank:
        step = _fail_at(step, rank, debug.fail_step)
    if debug.slow_rank == rank:
        step = _slow(step, debug.slow_seconds)
    return step


def non_finite_due(debug: DebugConfig, version: int) -> bool:
    """Whether the gradient of ``version`` is made non-finite (``debug.nan_at_step``, for
    ``debug.nan_steps`` steps, on every rank)."""
    return 0 <= debug.nan_at_step <= version < debug.nan_at_step + debug.nan_steps


def _non_finite(step: GradientStep, debug: DebugConfig) -> GradientStep:
    def faulty(batch: Batch, version: int) -> tuple[np.ndarray, dict]:
        grad, losses = step(batch, version)
        if non_finite_due(debug, version):
            grad[:] = np.nan  # all shards see it: every parameter server skips the update
        return grad, losses
    return faulty


def _fail_at(step: Callable[[S, int], R], rank: int, fail_step: int) -> Callable[[S, int], R]:
    def faulty(batch: S, version: int) -> R:
        if version == fail_step:
            raise RuntimeError(f"injected failure on rank {rank} at step {version} "
                               f"(debug.fail_rank)")
        return step(batch, version)
    return faulty


def _slow(step: Callable[[S, int], R], seconds: float) -> Callable[[S, int], R]:
    def faulty(batch: S, version: int) -> R:
        time.sleep(seconds)
        return step(batch, version)
    return faulty
