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
    rank (a parameter server submits its shard). With ``at_end`` (``eval.at_end``) the
    parameters the run ends with go too (:meth:`last`), unless it trained nothing past
    ``start``, the step it started from."""

    def __init__(self, every: int, submit: Callable[[int, np.ndarray], None], *, at_end: bool,
                 start: int):
        self.every, self.submit, self.at_end, self.start = every, submit, at_end, start
        self.submitted = -1  # the newest step submitted

    def after_step(self, step: int, theta: np.ndarray) -> None:
        """Submit ``theta`` if ``step`` is due for evaluation."""
        if self.every and step % self.every == 0:
            self._submit(step, theta)

    def last(self, step: int, theta: np.ndarray) -> None:
        """The run ended at ``step`` with ``theta``: submit them unless done already."""
        if self.every and self.at_end and self.start < step != self.submitted:
            self._submit(step, theta)

    def _submit(self, step: int, theta: np.ndarray) -> None:
        self.submitted = step
        self.submit(step, theta)
