"""The staged-gradient measurement's arithmetic (dba3c.benchmarks.stages): FLOP fractions by
hand, and stage times from callback stamps."""

import pytest

from dba3c.benchmarks.stages import flop_fractions, stage_spans
from dba3c.learning.models import NetSpec


def test_flop_fractions_of_the_mlp_by_hand():
    # stage FLOPs [512, 8576] (tests/unit/learning/test_models.py); backward: stage 0
    # F_0 = 512 (no input gradient), stage 1 2 F_1 = 17152; one step: 512 + 8576 + 512 +
    # 17152 = 26752
    forward, backward = flop_fractions(NetSpec("mlp", 64, (4,), 2).stage_flops())
    assert forward == pytest.approx([512 / 26752, 8576 / 26752])
    assert backward == pytest.approx([512 / 26752, 17152 / 26752])
    assert sum(forward) + sum(backward) == pytest.approx(1.0)


def test_stage_spans_from_the_callback_stamps():
    # before_forward at 0, 1, 3 s; after_backward (bucket 0, 1, 2) at 10, 8, 5 s:
    # forward of stages 0, 1: 1, 2; backward of stages 0, 1: 10 - 8, 8 - 5; stage 2 both: 5 - 3
    assert stage_spans([0.0, 1.0, 3.0], [10.0, 8.0, 5.0]) == ([1.0, 2.0], [2.0, 3.0], 2.0)
