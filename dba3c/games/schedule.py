"""Which global steps are evaluated: the one place that decides and submits, whether the
evaluator is a thread of this process (:class:`dba3c.games.evaluation.BackgroundEvaluator`)
or its own rank (snapshots from the parameter servers or the collective ranks). No
TensorFlow here: parameter servers import this module.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def evaluates_at_end(every: int, at_end: bool, start: int, step: int) -> bool:
    """Whether a run that started from step ``start`` and ended at ``step`` evaluates the
    parameters it ended with (``eval.at_end``): only a run long enough for the periodic
    evaluations (``step >= every``) that trained something. A smoke run of a few steps
    ends at once instead of playing ``eval.episodes`` games of an untrained agent."""
    return bool(every) and at_end and start < step and step >= every


class EvalSchedule:
    """Every ``every`` global steps (never when 0) the parameters at that step go to
    ``submit(step, theta)``: to an in-process evaluator, or as a snapshot to the evaluator
    rank (a parameter server submits its shard). With ``at_end`` (``eval.at_end``) the
    parameters the run ends with go too (:meth:`last`), when :func:`evaluates_at_end`."""

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
        if evaluates_at_end(self.every, self.at_end, self.start, step) and \
                step != self.submitted:
            self._submit(step, theta)

    def _submit(self, step: int, theta: np.ndarray) -> None:
        self.submitted = step
        self.submit(step, theta)
