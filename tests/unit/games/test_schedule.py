"""dba3c.games.schedule: the steps whose parameters are evaluated, the last one included."""

from __future__ import annotations

import numpy as np
import pytest

from dba3c.games.schedule import EvalSchedule

THETA = np.zeros(3, np.float32)


def submitted(every: int, at_end: bool, start: int, steps: range, last: int) -> list[int]:
    """The steps submitted by a run from ``start`` through ``steps`` that ended at
    ``last``."""
    sent: list[int] = []
    schedule = EvalSchedule(every, lambda step, _theta: sent.append(step), at_end=at_end,
                            start=start)
    for step in steps:
        schedule.after_step(step, THETA)
    schedule.last(last, THETA)
    schedule.last(last, THETA)  # once is enough
    return sent


@pytest.mark.parametrize("every,at_end,start,steps,last,expected", [
    (10, True, 0, range(1, 26), 25, [10, 20, 25]),
    (10, True, 0, range(1, 31), 30, [10, 20, 30]),  # the last step was due anyway
    (10, False, 0, range(1, 26), 25, [10, 20]),  # eval.at_end=false
    (0, True, 0, range(1, 26), 25, []),  # eval.every=0: no evaluation at all
    (10, True, 25, range(26, 26), 25, []),  # a finished run started again trains nothing
    (10, True, 0, range(1, 4), 25, [25]),  # a worker that missed the last steps' after_step
    (10, True, 0, range(1, 4), 3, []),  # a smoke run shorter than eval.every: no games
    (10, True, 8, range(9, 13), 12, [10, 12]),  # resumed past every: the end is evaluated
    (10, True, 3, range(4, 8), 7, []),  # resumed, still short of every
], ids=["ends-between", "ends-on-a-due-step", "at-end-off", "never", "nothing-trained",
        "unseen-steps", "shorter-than-every", "resumed-past-every", "resumed-short"])
def test_every_due_step_and_the_one_the_run_ended_at(every, at_end, start, steps, last,
                                                      expected):
    assert submitted(every, at_end, start, steps, last) == expected
