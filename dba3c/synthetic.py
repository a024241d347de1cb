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

import numpy as np

from dba3c.config import Config
from dba3c.rollout import Batch
from dba3c.worker import Worker

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


def slow_ranks(workers: tuple[int, ...], num_slow: int) -> tuple[int, ...]:
    """The stragglers: the last ``num_slow`` of the worker ranks."""
    return workers[len(workers) - num_slow:] if num_slow else ()


class NoNetwork:
    """A synthetic worker's stand-in for the learner: parameters arrive and go unused."""

    def set_params(self, theta: np.ndarray, version: int = 0) -> None:
        """Nothing to load: the gradient does not depend on the parameters."""


class SyntheticWorker(Worker):
    """A :class:`~dba3c.worker.Worker` whose gradient is a timed wait and a seeded vector.

    Args:
      cfg: the whole Config. rank: this rank. num_params: the model's parameter count.
      workers: every worker rank (the last ``synthetic.slow_workers`` are stragglers).
    """

    def __init__(self, cfg: Config, rank: int, num_params: int, workers: tuple[int, ...]):
        # NoNetwork has only set_params: this class replaces both steps that use the rest
        super().__init__(cfg, rank, NoNetwork(), pool=None)  # type: ignore[arg-type]
        self.num_params = num_params
        syn = cfg.synthetic
        self.factor = syn.slow_factor if rank in slow_ranks(workers, syn.slow_workers) else 1.0
        self._next_batch = self._empty_batch  # the base class times _gradient_of

    def _empty_batch(self, version: int) -> Batch:
        n = self.cfg.train.batch_size  # data points the modelled worker would train on
        return Batch(np.empty((n, 0), np.uint8), np.zeros(n, np.int32),
                     np.zeros(n, np.float32), np.full(n, version, np.int64))

    def _gradient_of(self, batch: Batch, version: int) -> tuple[np.ndarray, dict]:
        """The seeded gradient, returned once its modelled compute time has passed."""
        t0 = time.perf_counter()
        syn, seed = self.cfg.synthetic, self.cfg.run.seed
        grad = synthetic_gradient(self.num_params, seed, self.rank, version)
        wait = step_seconds(syn.compute_ms, syn.jitter, self.factor, (seed, self.rank, version))
        remaining = t0 + wait - time.perf_counter()  # making the gradient counts as compute
        if remaining > 0:
            time.sleep(remaining)
        return grad, {}
