"""Which global steps are evaluated: the one place that decides and submits, whether the
evaluator is a thread of this process (:class:`dba3c.games.evaluation.BackgroundEvaluator`)
or its own rank (snapshots from the parameter servers or the collective ranks). No
TensorFlow here: parameter servers import this module.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


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
