"""Fault injection (``debug.*``): chosen once per rank, and exactly the faults asked for."""

from __future__ import annotations

import time
from typing import cast

import numpy as np
import pytest

from dba3c.config import DebugConfig
from dba3c.learning.rollout import Batch
from dba3c.training.faults import with_faults

NO_BATCH = cast(Batch, None)  # Step ignores its batch


class Step:
    """A gradient step that records the versions it computed."""

    def __init__(self):
        self.versions: list[int] = []

    def __call__(self, batch, version: int):
        self.versions.append(version)
        return np.ones(3, np.float32), {"loss/total": 1.0}


def test_without_debug_keys_the_step_is_not_wrapped():
    step = Step()
    assert with_faults(DebugConfig(), 0, step) is step
    assert with_faults(DebugConfig(slow_rank=1, fail_rank=2, fail_step=3), 0, step) is step


def test_nan_steps_make_exactly_their_window_non_finite_on_every_rank():
    for rank in (0, 3):
        step = with_faults(DebugConfig(nan_at_step=3, nan_steps=2), rank, Step())
        finite = [bool(np.isfinite(step(NO_BATCH, v)[0]).all()) for v in range(7)]
        assert finite == [True, True, True, False, False, True, True]


def test_fail_rank_raises_at_its_step_before_computing():
    inner = Step()
    step = with_faults(DebugConfig(fail_rank=2, fail_step=5), 2, inner)
    for v in range(5):
        step(NO_BATCH, v)
    with pytest.raises(RuntimeError, match=r"^injected failure on rank 2 at step 5 "
                                           r"\(debug.fail_rank\)$"):
        step(NO_BATCH, 5)
    assert inner.versions == [0, 1, 2, 3, 4]


def test_slow_rank_sleeps_before_each_step():
    step = with_faults(DebugConfig(slow_rank=1, slow_seconds=0.05), 1, Step())
    t0 = time.perf_counter()
    for v in range(3):
        step(NO_BATCH, v)
    assert time.perf_counter() - t0 >= 3 * 0.05
