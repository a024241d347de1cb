"""ScoreTracker (dba3c.games.envs): real game scores per env from an asynchronous step stream.

Scripted steps check the bookkeeping against sums written out by hand; one test plays real
Breakout with ``episodic_life`` to check what the simulators do with lives.
"""

import numpy as np

from dba3c.core import Step
from dba3c.games.envs import EnvPool, ScoreTracker


def make_step(env_ids, r, terminated=(), truncated=(), lives=None) -> Step:
    """One recv for ``env_ids`` with rewards ``r``; ``terminated``/``truncated`` list env ids;
    ``lives`` per position (1 each by default)."""
    ids = np.asarray(env_ids)
    return Step(obs=np.zeros((len(ids), 1), np.float32), r_t=np.asarray(r, np.float32),
                terminated=np.isin(ids, terminated), truncated=np.isin(ids, truncated),
                env_ids=ids, lives=np.asarray(np.ones(len(ids)) if lives is None else lives))


def test_real_scores_are_summed_per_env_across_asynchronous_subsets():
    tracker = ScoreTracker(3)
    assert tracker.update(make_step([0, 2], [5.0, 30.0])) == []
    assert tracker.update(make_step([1, 0], [-2.0, 4.0])) == []
    assert tracker.update(make_step([2, 1], [10.0, 0.5])) == []
    # unclipped sums: env 0: 5 + 4 = 9;  env 1: -2 + .5 = -1.5;  env 2: 30 + 10 = 40
    np.testing.assert_array_equal(tracker.score, [9.0, -1.5, 40.0])
    # env 2 ends (its last reward counts), env 0 goes on
    assert tracker.update(make_step([0, 2], [1.0, 100.0], terminated=[2])) == [(2, 140.0)]
    np.testing.assert_array_equal(tracker.score, [10.0, -1.5, 0.0])
    # the autoreset step (reward 0) starts env 2's next game from 0; env 1 is cut by the
    # time limit, which ends a game too
    assert tracker.update(make_step([2, 1], [0.0, 3.0], truncated=[1])) == [(1, 1.5)]
    assert tracker.update(make_step([2, 0], [6.0, 2.0], terminated=[0])) == [(0, 12.0)]
    np.testing.assert_array_equal(tracker.score, [0.0, 0.0, 6.0])
    assert tracker.num_episodes == 3


def test_without_episodic_life_every_terminal_ends_the_game():
    tracker = ScoreTracker(1)
    assert tracker.update(make_step([0], [2.0], lives=[3])) == []
    assert tracker.update(make_step([0], [1.0], terminated=[0], lives=[3])) == [(0, 3.0)]


def test_with_episodic_life_a_lost_life_does_not_end_the_game_score():
    tracker = ScoreTracker(2, episodic_life=True)
    assert tracker.update(make_step([0, 1], [1.0, 7.0], lives=[3, 2])) == []
    # env 0 loses a life: terminal for learning, but 2 lives are left
    assert tracker.update(make_step([0], [4.0], terminated=[0], lives=[2])) == []
    assert tracker.update(make_step([0, 1], [0.0, 1.0], terminated=[0, 1],
                                    lives=[1, 1])) == []
    # env 0's last life: the game is over and its score is every life's: 1 + 4 + 0 + 5 = 10
    assert tracker.update(make_step([0], [5.0], terminated=[0], lives=[0])) == [(0, 10.0)]
    # a time limit ends the game whatever the lives: env 1: 7 + 1 + 2 = 10
    assert tracker.update(make_step([1], [2.0], truncated=[1], lives=[1])) == [(1, 10.0)]
    assert tracker.num_episodes == 2


def test_online_score_is_the_mean_of_the_last_window_games():
    tracker = ScoreTracker(2, window=3)
    assert tracker.online_score() is None
    for score in [1.0, 2.0, 3.0, 4.0, 10.0]:  # games that end at once, alternating envs
        env = tracker.num_episodes % 2
        tracker.update(make_step([env], [score], terminated=[env]))
    assert tracker.num_episodes == 5
    assert tracker.online_score() == (3.0 + 4.0 + 10.0) / 3


def test_online_score_spans_a_wave_of_games_one_per_env():
    """2048 simulators start together, as an emulated 64-worker step's do: their first
    games end in order of length, and the longer ones score more. Once every env has ended
    one game, the online score is the mean of all 2048 games, not of the longest few."""
    num_envs = 2048
    tracker = ScoreTracker(num_envs)
    scores = [-21.0 + (i % 4) for i in range(num_envs)]  # -21 .. -18, 512 of each
    for env in sorted(range(num_envs), key=lambda i: scores[i]):  # shortest games end first
        tracker.update(make_step([env], [scores[env]], terminated=[env]))
    assert tracker.online_score() == sum(scores) / num_envs == -19.5
    # a window of 10 games would have reported the longest games' -18
    assert ScoreTracker(3).recent.maxlen == 10


def test_episodic_life_breakout_loses_lives_within_one_game():
    """Real ale-py Breakout (5 lives), random play, 2 envs stepped asynchronously one at a
    time: with episodic_life each lost life is a terminal, the game goes on with one life
    fewer, and the tracker reports one game per 5 lives with every reward of the game."""
    pool = EnvPool("breakout", 2, batch_size=1, num_threads=1, episodic_life=True, noop_max=0)
    tracker = ScoreTracker(2, episodic_life=True)
    rng = np.random.default_rng(0)
    # lives left at each terminal of the current game
    terminal_lives: dict[int, list[int]] = {0: [], 1: []}
    rewards = {0: 0.0, 1: 0.0}  # rewards of the current game, summed here
    try:
        step = pool.reset(seed=0)
        for _ in range(20_000):
            pool.send(rng.integers(0, pool.num_actions, len(step.env_ids)))
            step = pool.recv()
            (env,), (r,) = step.env_ids.tolist(), step.r_t.tolist()
            rewards[env] += r
            if step.terminated[0]:
                terminal_lives[env].append(int(step.lives[0]))
            finished = tracker.update(step)
            if finished:
                break
    finally:
        pool.close()
    assert finished, "no Breakout game finished in 20,000 steps"
    assert terminal_lives[env] == [4, 3, 2, 1, 0]
    assert finished == [(env, rewards[env])]
