"""Synthetic-compute workers: the real protocol at scale, without TensorFlow or simulators.

With ``synthetic.enabled`` every worker rank runs a :class:`SyntheticWorker`: per step it
waits its compute time (``synthetic.compute_ms``, stretched by ``synthetic.jitter`` and, for
the last ``synthetic.slow_workers`` workers, by ``synthetic.slow_factor``), then pushes a
seeded gradient of the real model's size (:func:`synthetic_gradient`) through the real
:class:`~dba3c.core.ParameterClient`. Parameter servers, the chief, Adam, checkpoints and
metrics are the real code; the parameter count comes from the pure NetSpec layout. No rank
of such a run imports TensorFlow (evaluation is refused by the config validator), so a rank
stays small: 69 of them fit on one machine.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from dba3c.config import Config
from dba3c.learning.params import ShardPlan, layer_buckets
from dba3c.learning.rollout import Batch
from dba3c.training.worker import StagedInput, Worker

if TYPE_CHECKING:
    from dba3c.learning.models import NetSpec

GRAD_SCALE = 1e-3  # gradient entries ~ N(0, GRAD_SCALE^2): small, like clipped real ones


def synthetic_gradient(num_params: int, seed: int, rank: int, version: int) -> np.ndarray:
    """The gradient rank ``rank`` sends for step ``version``: float32 [num_params] of
    ``GRAD_SCALE`` x standard normals from ``np.random.default_rng([seed, rank, version])``."""
    rng = np.random.default_rng([seed, rank, version])
    grad = rng.standard_normal(num_params, np.float32)
    grad *= np.float32(GRAD_SCALE)
    return grad


def step_seconds(compute_ms: float, jitter: float, factor: float,
                 key: tuple[int, int, int]) -> float:
    """One step's compute time: ``compute_ms`` x ``factor`` x (1 + jitter x E), E ~ Exp(1)
    drawn from ``np.random.default_rng([*key, 1])`` (key = (seed, rank, version))."""
    seconds = compute_ms / 1000.0 * factor
    if jitter:
        seconds *= 1.0 + jitter * np.random.default_rng([*key, 1]).exponential()
    return seconds


def stage_seconds(compute_s: float, stage_flops: Sequence[int]) -> tuple[list[float],
                                                                       list[float]]:
    """A gradient step of ``compute_s`` split over its stages (one per layer bucket) by their
    forward FLOPs F_b: forward F_b / D and backward 2 F_b / D of it (F_0 / D for stage 0,
    which needs no input gradient), D = the sum of all of them. Returns (forward seconds,
    backward seconds), stage order."""
    backward = [f * (1 if b == 0 else 2) for b, f in enumerate(stage_flops)]
    scale = compute_s / (sum(stage_flops) + sum(backward))
    return [f * scale for f in stage_flops], [f * scale for f in backward]


def sleep_until(deadline: float) -> None:
    """Sleep until ``time.perf_counter()`` reaches ``deadline``."""
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


def slow_ranks(workers: tuple[int, ...], num_slow: int) -> tuple[int, ...]:
    """The stragglers: the last ``num_slow`` of the worker ranks."""
    return workers[len(workers) - num_slow:] if num_slow else ()


class NoNetwork:
    """A synthetic worker's stand-in for the learner: parameters arrive and go unused."""

    def set_params(self, theta: np.ndarray, version: int = 0, *,
                   bucketed: bool = False) -> None:
        """Nothing to load: the gradient does not depend on the parameters."""

    def assign_bucket(self, bucket: int, theta_bucket: np.ndarray) -> None:
        """Nothing to load, bucket by bucket."""


class SyntheticWorker(Worker):
    """A :class:`~dba3c.training.worker.Worker` whose gradient is a timed wait and a seeded vector.

    Args:
      cfg: the whole Config. rank: this rank. spec: the modelled network (its size; its
        stages' FLOPs time a staged step).
      workers: every worker rank (the last ``synthetic.slow_workers`` are stragglers).
    """

    def __init__(self, cfg: Config, rank: int, spec: NetSpec, workers: tuple[int, ...]):
        # NoNetwork only loads parameters: this class replaces every step that uses the rest
        super().__init__(cfg, rank, NoNetwork(), pool=None)  # type: ignore[arg-type]
        layout = spec.layout()
        self.num_params = layout.num_params
        self.stage_flops = spec.stage_flops()
        self.buckets = ShardPlan(layout.num_params, 1, layer_buckets(layout))
        syn = cfg.synthetic
        self.factor = syn.slow_factor if rank in slow_ranks(workers, syn.slow_workers) else 1.0
        self.next_batches = self._empty_batches  # the base class times compute_gradient

    def _empty_batches(self, version: int) -> list[Batch]:
        n = self.cfg.train.batch_size  # data points the modelled worker would train on
        return [Batch(np.empty((n, 0), np.uint8), np.zeros(n, np.int32),
                      np.zeros(n, np.float32), np.full(n, version, np.int64))]

    def _compute_seconds(self, version: int) -> float:
        syn = self.cfg.synthetic
        return step_seconds(syn.compute_ms, syn.jitter, self.factor,
                            (self.cfg.run.seed, self.rank, version))

    def compute_gradient(self, batch: Batch, version: int) -> tuple[np.ndarray, dict]:
        """The seeded gradient, returned once its modelled compute time has passed."""
        t0 = time.perf_counter()  # making the gradient counts as compute
        grad = synthetic_gradient(self.num_params, self.cfg.run.seed, self.rank, version)
        sleep_until(t0 + self._compute_seconds(version))
        return grad, {}

    def compute_staged_gradient(self, step: StagedInput, version: int) -> dict:
        """The seeded gradient bucket by bucket on the modelled timeline
        (:func:`stage_seconds` of the compute time x (1 + ``dist.overlap_cost``), what
        staging a step costs a real rank): stage b's forward pass starts once ``before_forward(b)``
        returned (waiting for its parameters is not compute); bucket b leaves when its
        backward pass ends, the last bucket first. Making the gradient counts as compute, as
        in :meth:`compute_gradient`: it runs in stage 0's forward time (after the stage's
        parameters arrived; made before them, it delayed every rank's step by the time 64
        ranks on 2 cores took to make theirs at once)."""
        _, before_forward, after_backward = step
        compute_s = self._compute_seconds(version) * (1.0 + self.cfg.dist.overlap_cost)
        forward_s, backward_s = stage_seconds(compute_s, self.stage_flops)
        deadline = time.perf_counter()
        for b, seconds in enumerate(forward_s):
            before_forward(b)
            deadline = max(deadline, time.perf_counter()) + seconds
            if b == 0:
                grad = synthetic_gradient(self.num_params, self.cfg.run.seed, self.rank,
                                          version)
            sleep_until(deadline)
        for b in reversed(range(len(backward_s))):
            deadline += backward_s[b]
            sleep_until(deadline)
            lo, hi = self.buckets.bucket_bounds(b)
            after_backward(b, grad[lo:hi])
        return {}
