"""The one schema of a worker's report: what :meth:`dba3c.training.worker.Worker.report` produces,
what travels to the chief as a vector (:class:`dba3c.distributed.wire.ReportMsg`), and what the
chief
sums and averages into a metrics line (:meth:`dba3c.training.chief.Chief.worker_report`).

Metric names follow the field names: ``loss/<field of Losses>``, ``time/<field of Seconds>``.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, field, fields

import numpy as np


@dataclass(frozen=True)
class Losses:
    """The loss terms of the newest gradient (None: not computed, e.g. a final report or a
    synthetic worker)."""

    policy: float | None = None
    value: float | None = None
    entropy: float | None = None
    total: float | None = None

    @classmethod
    def from_metrics(cls, losses: dict[str, float]) -> Losses:
        """From :meth:`dba3c.learning.learner.Learner.gradient`'s ``loss/<name>`` dict."""
        return cls(**{f.name: losses.get(f"loss/{f.name}") for f in fields(cls)})

    def metrics(self) -> dict[str, float | None]:
        """By metric name, ``loss/<name>``."""
        return {f"loss/{f.name}": getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Seconds:
    """Cumulative seconds a worker spent on each activity (the chief's ``time/*`` fractions)."""

    compute: float = 0.0
    wait_data: float = 0.0
    wait_params: float = 0.0
    predict: float = 0.0
    emulate: float = 0.0


FRACTIONS = tuple(f.name for f in fields(Seconds))
COUNTERS = 3  # data_points, env_frames, episodes: the integer fields of the vector form


@dataclass(frozen=True)
class WorkerReport:
    """One worker's cumulative counters, its latest losses and policy lag.

    data_points: mini-batch rows trained on. env_frames: emulator frames. episodes: finished
    episodes. online_score: mean recent training score (None before the first episode).
    policy_lag: updates between acting and training on the last batch (None: no batch).
    """

    data_points: int = 0
    env_frames: int = 0
    episodes: int = 0
    online_score: float | None = None
    policy_lag: float | None = None
    losses: Losses = field(default_factory=Losses)
    seconds: Seconds = field(default_factory=Seconds)

    def averaged_metrics(self) -> dict[str, float | None]:
        """The metrics the chief averages over the workers that sent them."""
        return {**self.losses.metrics(), "perf/policy_lag": self.policy_lag}

    def to_vector(self) -> np.ndarray:
        """float64 [VECTOR_SIZE]: the fields in order, None as NaN."""
        values = (self.data_points, self.env_frames, self.episodes, self.online_score,
                  self.policy_lag, *astuple(self.losses), *astuple(self.seconds))
        return np.array([np.nan if v is None else v for v in values], np.float64)

    @classmethod
    def from_vector(cls, vec: np.ndarray) -> WorkerReport:
        """Inverse of :meth:`to_vector`."""
        values = [None if math.isnan(v) else float(v) for v in vec.tolist()]
        data_points, env_frames, episodes = (int(v or 0) for v in values[:COUNTERS])
        num_losses = len(fields(Losses))
        losses = values[COUNTERS + 2:COUNTERS + 2 + num_losses]
        seconds = [v or 0.0 for v in values[COUNTERS + 2 + num_losses:]]
        return cls(data_points, env_frames, episodes, values[COUNTERS], values[COUNTERS + 1],
                   Losses(*losses), Seconds(*seconds))


VECTOR_SIZE = WorkerReport().to_vector().size
AVERAGED = tuple(WorkerReport().averaged_metrics())  # metric names, in a metrics line's order
