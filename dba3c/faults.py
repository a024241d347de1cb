"""Fault injection for tests (the ``debug.*`` keys), chosen once when a worker starts.

:func:`with_faults` wraps a worker's gradient step in the faults its config asks of this rank:
a slow rank, a rank that fails at a step, non-finite gradients for a few steps. Without such a
key the step comes back unchanged, so real training tests nothing for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from dba3c.config import DebugConfig
from dba3c.rollout import Batch

GradientStep = Callable[[Batch, int], tuple[np.ndarray, dict]]
"""(mini-batch, parameter version) -> (flat gradient, losses)."""


def with_faults(debug: DebugConfig, rank: int, step: GradientStep) -> GradientStep:
    """``step`` wrapped in each fault that ``debug`` injects on ``rank``, in the order they
    strike: sleep (``slow_rank``), raise (``fail_rank``), then the gradient made non-finite
    (``nan_at_step``, every rank)."""
    if debug.nan_at_step >= 0:
        step = _non_finite(step, debug.nan_at_step, debug.nan_at_step + debug.nan_steps)
    if debug.fail_rank == rank:
        step = _fail_at(step, rank, debug.fail_step)
    if debug.slow_rank == rank:
        step = _slow(step, debug.slow_seconds)
    return step


def _non_finite(step: GradientStep, first: int, end: int) -> GradientStep:
    def faulty(batch: Batch, version: int) -> tuple[np.ndarray, dict]:
        grad, losses = step(batch, version)
        if first <= version < end:
            grad[:] = np.nan  # all shards see it: every parameter server skips the update
        return grad, losses
    return faulty


def _fail_at(step: GradientStep, rank: int, fail_step: int) -> GradientStep:
    def faulty(batch: Batch, version: int) -> tuple[np.ndarray, dict]:
        if version == fail_step:
            raise RuntimeError(f"injected failure on rank {rank} at step {version} "
                               f"(debug.fail_rank)")
        return step(batch, version)
    return faulty


def _slow(step: GradientStep, seconds: float) -> GradientStep:
    def faulty(batch: Batch, version: int) -> tuple[np.ndarray, dict]:
        time.sleep(seconds)
        return step(batch, version)
    return faulty
