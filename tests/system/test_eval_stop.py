"""eval.stop_below_target: an evaluation ends once its mean can no longer reach
eval.target_score, on real Pong games, in one process (the background evaluator) and on
an evaluator rank."""

from __future__ import annotations

import pytest

from dba3c.games.envs import env_spaces
from dba3c.games.evaluation import make_eval_pool, play, stop_rule
from dba3c.games.scores import below_target
from dba3c.learning.learner import Learner
from dba3c.learning.models import make_net_spec
from dba3c.preset import load_config
from tests.support import ROOT, dba3c, read_jsonl

PONG = str(ROOT / "configs" / "pong_small.yaml")


def test_an_evaluation_below_target_is_the_first_games_of_the_whole_one():
    # untrained parameters lose every game: of 6 games (target 18, 108 points) the first
    # loss already leaves at most -21 + 5 x 21 = 84
    cfg = load_config(PONG, ["eval.stop_below_target=true", "eval.episodes=6",
                             "eval.num_envs=2"])
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    learner = Learner(spec, cfg.train, spec.init_params(3))
    pool = make_eval_pool(cfg, 6)
    try:
        whole = play(learner.predict, pool, 6, greedy=True, seed=11)
        stopped = play(learner.predict, pool, 6, greedy=True, seed=11,
                       give_up=stop_rule(cfg))
    finally:
        pool.close()
    assert len(whole) == 6
    k = next(k for k in range(7) if below_target(whole[:k], 6, 18.0, 21.0))
    # the games that end on the step that decides it count too: with 2 envs, one more
    n = len(stopped)
    assert 0 < k <= n <= k + 1 < 6 and stopped == whole[:n], (whole, stopped)


@pytest.mark.parametrize("command", [["train"], ["launch", "--workers", "1", "--evaluator"]])
def test_a_training_run_records_the_games_an_evaluation_below_target_played(tmp_path,
                                                                             command):
    # a run of 30 steps evaluates its final parameters and waits for it (eval.at_end), so an
    # evaluation finishes however slowly the machine runs
    run = tmp_path / "run"
    dba3c(*command, PONG, "train.max_steps=30", "eval.every=10", "eval.episodes=4",
          "eval.num_envs=2", "eval.stop_below_target=true", "run.checkpoint_every=0",
          "run.progress=none", f"run.dir={run}", timeout=240)
    evals = read_jsonl(run / "eval.jsonl")
    assert evals, "no evaluation finished"
    for e in evals:  # 4 games of up to 21 points could not reach 18 after these
        assert e["episodes"] < 4 and e["max"] < 18, e
        assert e["mean"] * e["episodes"] + (4 - e["episodes"]) * 21 < 18 * 4, e
