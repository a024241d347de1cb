"""eval.stop_below_target's rule (dba3c.games.evaluation, dba3c.games.scores): when even
the highest scores left miss eval.target_score, and which games it needs."""

from __future__ import annotations

import pytest

from dba3c.errors import UserError
from dba3c.games.evaluation import stop_rule
from dba3c.games.scores import below_target
from dba3c.preset import load_config
from tests.support import ROOT

PONG = str(ROOT / "configs" / "pong_small.yaml")
BREAKOUT = str(ROOT / "configs" / "breakout.yaml")


def test_below_target_once_even_the_highest_scores_left_miss_the_target():
    # 30 games, target 18 (540 points in all), at most 21 a game
    assert not below_target([], 30, 18.0, 21.0)  # 630 >= 540
    assert not below_target([-21.0, -21.0], 30, 18.0, 21.0)  # -42 + 28 x 21 = 546
    assert below_target([-21.0, -21.0, -21.0], 30, 18.0, 21.0)  # -63 + 27 x 21 = 504
    # exactly the target is still reachable: 15 x 18 + 15 x 21 = 585 = 19.5 x 30
    assert not below_target([18.0] * 15, 30, 19.5, 21.0)
    assert below_target([18.0] * 14 + [17.0], 30, 19.5, 21.0)
    assert below_target([20.0] * 29, 30, 21.0, 21.0)  # 580 + 21 < 630


def test_stop_below_target_needs_a_game_whose_highest_score_is_known():
    assert stop_rule(load_config(PONG, ["eval.stop_below_target=false"])) is None
    assert load_config(PONG).eval.stop_below_target  # the preset's
    assert not load_config(BREAKOUT).eval.stop_below_target
    with pytest.raises(UserError) as e:
        load_config(BREAKOUT, ["eval.stop_below_target=true"])
    assert "eval.stop_below_target=true needs a game whose highest score is known (pong), " \
           "not env.id='breakout'" in str(e.value)
    with pytest.raises(UserError, match="eval.target_score=22 is above pong's highest score "
                                        "21: with eval.stop_below_target=true no evaluation"):
        load_config(PONG, ["eval.stop_below_target=true", "eval.target_score=22"])
