"""Human-normalized scores (dba3c.games.scores) in eval.jsonl, summary.json and the figures, and the
evaluation protocols (eval.protocol)."""

from __future__ import annotations

import json

import pytest

from dba3c.analysis import plots
from dba3c.core import Evaluation
from dba3c.errors import UserError
from dba3c.games.envs import env_spaces
from dba3c.games.scores import RANDOM_AND_HUMAN, human_normalized_score, score_stats
from dba3c.preset import load_config
from dba3c.training.chief import Chief
from tests.support import NO_PARAMS, ROOT, read_jsonl

BREAKOUT = str(ROOT / "configs" / "breakout.yaml")


def test_human_normalized_score_is_0_at_random_and_1_at_human():
    assert len(RANDOM_AND_HUMAN) == 57
    assert human_normalized_score("pong", -20.7) == 0.0
    assert human_normalized_score("pong", 14.6) == 1.0
    assert human_normalized_score("breakout", 350.0) == pytest.approx((350 - 1.7) / 28.8)
    assert human_normalized_score("CartPole-v1", 200.0) is None


def test_every_table_entry_is_an_ale_rom():
    from dba3c.config import ale_games

    assert set(RANDOM_AND_HUMAN) <= set(ale_games())


def test_score_stats():
    stats = score_stats("pong", [-21.0, -19.0, -20.0, -16.0])
    assert stats == {"mean": -19.0, "max": -16.0, "min": -21.0,
                     "std": pytest.approx(1.870828693), "episodes": 4,
                     "hns": pytest.approx(1.7 / 35.3)}
    assert "hns" not in score_stats("CartPole-v1", [10.0, 30.0])


def _chief(tmp_path, config, *overrides):
    cfg = load_config(config, [f"run.dir={tmp_path}", "run.progress=none", *overrides])
    return Chief(cfg, None, NO_PARAMS, num_workers=1, hosts=["h0"])


def test_chief_writes_hns_and_the_protocol(tmp_path):
    chief = _chief(tmp_path, BREAKOUT, "env.id=pong", "model.kind=a3c_ff")
    chief.on_eval(Evaluation(10, (-21.0, -19.0)))  # mean -20
    chief.on_eval(Evaluation(20, (-5.0, -3.0)))  # mean -4: the best
    chief.on_eval(Evaluation(30, (-11.0, -9.0)))  # mean -10: the latest
    chief.close()
    evals = read_jsonl(tmp_path / "eval.jsonl")
    assert [e["hns"] for e in evals] == pytest.approx([0.7 / 35.3, 16.7 / 35.3, 10.7 / 35.3])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["hns"] == pytest.approx(10.7 / 35.3)
    assert summary["best_hns"] == pytest.approx(16.7 / 35.3)
    assert summary["eval_protocol"] == "paper"


def test_a_game_without_reference_scores_has_no_hns(tmp_path):
    chief = _chief(tmp_path, str(ROOT / "configs" / "cartpole.yaml"))
    chief.on_eval(Evaluation(10, (100.0, 200.0)))
    chief.close()
    assert "hns" not in read_jsonl(tmp_path / "eval.jsonl")[0]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "hns" not in summary and summary["eval_protocol"] == "paper"


def test_plot_draws_hns_when_evaluations_have_it(tmp_path):
    run_dir = tmp_path / "run"
    chief = _chief(run_dir, BREAKOUT, "env.id=pong", "model.kind=a3c_ff", "run.log_every=1",
                   "eval.protocol=machado")
    chief.on_step(1)  # a metrics line (no worker reported yet): metrics.jsonl exists
    chief.on_eval(Evaluation(1, (-20.7,)))
    chief.on_eval(Evaluation(2, (14.6,)))
    chief.close()
    assert json.loads((run_dir / "summary.json").read_text())["eval_protocol"] == "machado"
    written = plots.plot_command([run_dir], tmp_path / "out")
    assert tmp_path / "out" / "hns_vs_time.png" in written
    rows = (tmp_path / "out" / "hns_vs_time.csv").read_text().splitlines()
    assert rows[0].split(",") == ["run", "step", "minutes", "hns"]
    assert [float(r.split(",")[-1]) for r in rows[1:]] == [0.0, 1.0]


def test_machado_protocol_sets_its_keys_for_training_and_evaluation():
    paper = load_config(BREAKOUT)
    cfg = load_config(BREAKOUT, ["eval.protocol=machado"])
    assert (cfg.env.sticky_actions, cfg.env.full_action_space, cfg.env.episodic_life,
            cfg.env.noop_max, cfg.eval.noop_max) == (0.25, True, False, 0, 0)
    assert (paper.env.sticky_actions, paper.env.full_action_space, paper.env.noop_max,
            paper.eval.noop_max) == (0.0, False, 30, 30)
    # the full action set: 18 actions for Breakout instead of its minimal 4
    assert env_spaces(paper)[1] == 4 and env_spaces(cfg)[1] == 18
    # its own values given again are fine
    assert load_config(BREAKOUT, ["eval.protocol=machado", "env.noop_max=0"]) == cfg


def test_machado_protocol_refuses_contradicting_keys_all_at_once():
    with pytest.raises(UserError) as e:
        load_config(BREAKOUT, ["eval.protocol=machado", "env.sticky_actions=0.1",
                               "env.episodic_life=true", "eval.noop_max=10"])
    msg = str(e.value)
    for key, mine, theirs in (("env.sticky_actions", "0.25", "0.1"),
                              ("env.episodic_life", "False", "True"),
                              ("eval.noop_max", "0", "10")):
        assert f"eval.protocol=machado sets {key}={mine}; {key}={theirs} contradicts it" in msg


def test_protocols_and_full_action_space_need_an_atari_game():
    cartpole = str(ROOT / "configs" / "cartpole.yaml")
    with pytest.raises(UserError) as e:
        load_config(cartpole, ["eval.protocol=machado"])
    assert "eval.protocol='machado' applies to ALE games only, not env.id='CartPole-v1'" \
        in str(e.value)
    with pytest.raises(UserError, match="env.full_action_space=True applies to ALE games"):
        load_config(cartpole, ["env.full_action_space=true"])
    with pytest.raises(UserError, match="eval.protocol='sticky' must be one of paper, machado"):
        load_config(BREAKOUT, ["eval.protocol=sticky"])
