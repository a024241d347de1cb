"""RolloutAssembler (dba3c.learning.rollout) on scripted simulator streams.

Each test feeds hand-made ``Step`` objects the way the actor thread does (observe the outcome
of the last actions with V of the new observations, then record the actions sent for them)
and compares the data points with returns worked out by hand in the comments.

Observations are one number per env (s = 10 * env + t), so a data point shows which state
it came from; the action sent on state s is s + 100, so it shows the pairing too.
"""

import numpy as np
import pytest

from dba3c.core import Step
from dba3c.learning.rollout import Batch, GroupedAssembler, RolloutAssembler


def make_step(env_ids, obs, r=None, terminated=(), truncated=()) -> Step:
    """One recv: ``env_ids`` in batch order, one observation number each; ``terminated`` and
    ``truncated`` list env ids."""
    ids = np.asarray(env_ids)
    return Step(obs=np.asarray(obs, np.float32)[:, None],
                r_t=np.asarray(np.zeros(len(ids)) if r is None else r, np.float32),
                terminated=np.isin(ids, terminated), truncated=np.isin(ids, truncated),
                env_ids=ids, lives=np.ones(len(ids), np.int32))


def feed(assembler: RolloutAssembler, step: Step, v_tp1, version: int = 0) -> None:
    """What the actor does with one recv: close transitions, then act on the new states."""
    assembler.observe(step, np.asarray(v_tp1, np.float32))
    assembler.act(step, step.obs[:, 0].astype(np.int64) + 100, version)


def data_points(assembler: RolloutAssembler) -> list[tuple[float, int, float, int]]:
    """Every complete batch so far as (state, action, R, version) tuples, in batch order."""
    return [(float(b.obs[i, 0]), int(b.a[i]), float(b.R[i]), int(b.version[i]))
            for b in assembler.pop_batches() for i in range(len(b))]


def assert_points(got, expected) -> None:
    """(state, R) pairs match, returns to float32 precision; actions are state + 100."""
    assert [(s, a) for s, a, _, _ in got] == [(s, int(s) + 100) for s, _ in expected]
    np.testing.assert_allclose([R for _, _, R, _ in got], [R for _, R in expected], rtol=1e-6)


def one_env(t_max: int, gamma: float, reward_clip: float = 0.0) -> RolloutAssembler:
    return RolloutAssembler(1, t_max=t_max, gamma=gamma, reward_clip=reward_clip, batch_size=1)


def test_full_rollout_flushes_at_t_max_and_bootstraps_with_v():
    asm = one_env(t_max=3, gamma=0.5)
    feed(asm, make_step([0], [0]), [99.0])  # reset: nothing acted yet, V unused
    feed(asm, make_step([0], [1], r=[1.0]), [50.0])
    feed(asm, make_step([0], [2], r=[2.0]), [60.0])
    assert data_points(asm) == []  # two transitions < t_max: nothing closed yet
    feed(asm, make_step([0], [3], r=[3.0]), [8.0])  # third transition: close, V(s3) = 8
    # g = .5: R(s2) = 3 + .5 * 8                      = 7
    #         R(s1) = 2 + .5 * 3 + .25 * 8            = 5.5
    #         R(s0) = 1 + .5 * 2 + .25 * 3 + .125 * 8 = 3.75
    assert_points(data_points(asm), [(0, 3.75), (1, 5.5), (2, 7.0)])
    # the next rollout starts at s3 and closes only after three more transitions
    feed(asm, make_step([0], [4], r=[4.0]), [1.0])
    feed(asm, make_step([0], [5], r=[0.0]), [1.0])
    assert data_points(asm) == []
    feed(asm, make_step([0], [6], r=[2.0]), [-4.0])
    # R(s5) = 2 + .5 * -4 = 0;  R(s4) = 0 + .5 * 0 = 0;  R(s3) = 4 + .5 * 0 = 4
    assert_points(data_points(asm), [(3, 4.0), (4, 0.0), (5, 0.0)])


def test_terminal_mid_rollout_bootstraps_zero_and_the_autoreset_step_is_dropped():
    asm = one_env(t_max=5, gamma=0.5)
    feed(asm, make_step([0], [0]), [0.0])
    feed(asm, make_step([0], [1], r=[1.0]), [10.0])
    feed(asm, make_step([0], [2], r=[2.0], terminated=[0]), [20.0])  # s2: final observation
    # terminal: no bootstrap (V = 20 ignored).  R(s1) = 2;  R(s0) = 1 + .5 * 2 = 2
    assert_points(data_points(asm), [(0, 2.0), (1, 2.0)])
    # NEXT_STEP autoreset: the action sent on s2 is ignored and s3 is the new episode's
    # first state. ALE gives this step reward 0; 7 here would show if it were learned from.
    feed(asm, make_step([0], [3], r=[7.0]), [30.0])
    feed(asm, make_step([0], [4], r=[4.0]), [40.0])
    feed(asm, make_step([0], [5], r=[5.0], terminated=[0]), [50.0])
    # the new rollout starts at s3, not s2:  R(s4) = 5;  R(s3) = 4 + .5 * 5 = 6.5
    assert_points(data_points(asm), [(3, 6.5), (4, 5.0)])


def test_truncation_bootstraps_from_v_of_the_final_observation():
    asm = one_env(t_max=5, gamma=0.9)
    feed(asm, make_step([0], [0]), [0.0])
    feed(asm, make_step([0], [1], r=[1.0]), [5.0])
    feed(asm, make_step([0], [2], r=[2.0], truncated=[0]), [10.0])  # time limit at s2
    # R(s1) = 2 + .9 * 10 = 11;  R(s0) = 1 + .9 * 2 + .81 * 10 = 10.9
    assert_points(data_points(asm), [(0, 10.9), (1, 11.0)])
    feed(asm, make_step([0], [3], r=[7.0]), [0.0])  # autoreset step: dropped
    feed(asm, make_step([0], [4], r=[1.0], terminated=[0], truncated=[0]), [100.0])
    # terminated and truncated at once: a real terminal, no bootstrap.  R(s3) = 1
    assert_points(data_points(asm), [(3, 1.0)])


def test_terminal_on_the_t_max_th_step_bootstraps_zero():
    asm = one_env(t_max=2, gamma=0.5)
    feed(asm, make_step([0], [0]), [0.0])
    feed(asm, make_step([0], [1], r=[1.0]), [3.0])
    feed(asm, make_step([0], [2], r=[2.0], terminated=[0]), [1000.0])
    # R(s1) = 2;  R(s0) = 1 + .5 * 2 = 2   (with V it would have been 502 and 252)
    assert_points(data_points(asm), [(0, 2.0), (1, 2.0)])


def test_asynchronous_subsets_of_envs_keep_per_env_rollouts_and_positions():
    """batch_size 2 of 3 envs: each recv brings another subset, in another order, so V and
    rewards must be taken by position in the batch and filed by env id."""
    asm = RolloutAssembler(3, t_max=2, gamma=0.5, reward_clip=0.0, batch_size=1)
    feed(asm, make_step([0, 1], [0, 10]), [0.0, 0.0])  # reset batch: envs 0 and 1
    # env 2 shows up for the first time (its reset state 20): nothing to learn yet
    feed(asm, make_step([2, 0], [20, 1], r=[9.0, 1.0]), [0.0, 0.0])
    feed(asm, make_step([1, 2], [11, 21], r=[2.0, 3.0]), [100.0, 200.0])
    assert data_points(asm) == []  # every env has one transition, t_max is 2
    feed(asm, make_step([0, 1], [2, 12], r=[4.0, 5.0]), [6.0, 8.0])
    # env 0: R(s1) = 4 + .5 * 6 = 7;  R(s0) = 1 + .5 * 4 + .25 * 6 = 4.5
    # env 1: R(s11) = 5 + .5 * 8 = 9;  R(s10) = 2 + .5 * 5 + .25 * 8 = 6.5
    assert_points(data_points(asm), [(0, 4.5), (1, 7.0), (10, 6.5), (11, 9.0)])
    feed(asm, make_step([2, 0], [22, 3], r=[6.0, 0.0]), [12.0, 0.0])
    # env 2 (position 0): R(s21) = 6 + .5 * 12 = 12;  R(s20) = 3 + .5 * 6 + .25 * 12 = 9
    assert_points(data_points(asm), [(20, 9.0), (21, 12.0)])


def test_each_data_point_keeps_the_version_that_acted():
    asm = RolloutAssembler(2, t_max=3, gamma=0.5, reward_clip=0.0, batch_size=1)
    feed(asm, make_step([0], [0]), [0.0], version=7)
    feed(asm, make_step([1, 0], [10, 1]), [0.0, 0.0], version=8)
    feed(asm, make_step([0, 1], [2, 11]), [0.0, 0.0], version=9)
    feed(asm, make_step([0], [3]), [0.0], version=12)  # env 0 closes while version is 12
    assert [(s, version) for s, _, _, version in data_points(asm)] == [(0, 7), (1, 8), (2, 9)]
    feed(asm, make_step([1], [12]), [0.0], version=13)
    feed(asm, make_step([1], [13]), [0.0], version=14)
    assert [(s, version) for s, _, _, version in data_points(asm)] == [(10, 8), (11, 9),
                                                                       (12, 13)]


@pytest.mark.parametrize("reward_clip, expected", [
    # clipped to [-1, 1]: R(s1) = -1 + .5 * 4 = 1;  R(s0) = 1 + .5 * -1 + .25 * 4 = 1.5
    (1.0, [(0, 1.5), (1, 1.0)]),
    # unclipped:          R(s1) = -3 + .5 * 4 = -1; R(s0) = 5 + .5 * -3 + .25 * 4 = 4.5
    (0.0, [(0, 4.5), (1, -1.0)]),
])
def test_rewards_are_clipped_for_learning(reward_clip, expected):
    asm = one_env(t_max=2, gamma=0.5, reward_clip=reward_clip)
    feed(asm, make_step([0], [0]), [0.0])
    feed(asm, make_step([0], [1], r=[5.0]), [0.0])
    feed(asm, make_step([0], [2], r=[-3.0]), [4.0])
    assert_points(data_points(asm), expected)


def test_batches_hold_batch_size_points_oldest_first_and_keep_the_rest():
    asm = RolloutAssembler(1, t_max=3, gamma=0.5, reward_clip=0.0, batch_size=4)
    feed(asm, make_step([0], [0]), [0.0])
    for t in range(1, 7):  # two rollouts of 3: six data points, s0 .. s5
        feed(asm, make_step([0], [t], r=[1.0]), [0.0])
    (batch,) = asm.pop_batches()
    assert len(batch) == 4
    assert batch.obs.shape == (4, 1) and batch.obs[:, 0].tolist() == [0, 1, 2, 3]
    assert (batch.a.dtype, batch.R.dtype, batch.version.dtype) == (
        np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.int64))
    assert batch.a.tolist() == [100, 101, 102, 103]
    # R(s0) = 1 + .5 + .25 = 1.75, R(s1) = 1 + .5 = 1.5, R(s2) = 1; s3 as s0
    np.testing.assert_allclose(batch.R, [1.75, 1.5, 1.0, 1.75])
    assert asm.pop_batches() == []  # s4, s5 wait for two more
    for t in range(7, 10):
        feed(asm, make_step([0], [t], r=[1.0]), [0.0])
    (batch,) = asm.pop_batches()
    assert batch.obs[:, 0].tolist() == [4, 5, 6, 7]


def test_each_group_of_envs_makes_the_mini_batches_a_worker_of_its_own_would_make():
    """GroupedAssembler over 2 groups of 3 envs (ids 0-5), fed random asynchronous subsets
    with episode ends (an observation is 100 t + env id): each group's mini-batches are
    those of a lone RolloutAssembler fed only that group's envs (renumbered 0-2), and a
    bundle holds one of each group, in order."""
    rng = np.random.default_rng(3)
    grouped = GroupedAssembler(2, 3, t_max=3, gamma=0.9, reward_clip=1.0, batch_size=4)
    alone = [RolloutAssembler(3, t_max=3, gamma=0.9, reward_clip=1.0, batch_size=4)
             for _ in range(2)]
    t = 0
    bundles: list[list[Batch]] = []
    made: list[list[Batch]] = [[], []]
    for version in range(60):
        ids = np.sort(rng.choice(6, size=3, replace=False))
        t += 1
        step = make_step(ids, 100 * t + ids, r=rng.normal(size=3) * 2,
                         terminated=ids[rng.random(3) < 0.1])
        v = rng.normal(size=3).astype(np.float32)
        a = rng.integers(0, 4, 3)
        grouped.observe(step, v)
        grouped.act(step, a, version)
        bundles += grouped.pop_bundles()
        for g, asm in enumerate(alone):
            rows = np.flatnonzero(ids // 3 == g)
            sub = make_step(ids[rows] - 3 * g, step.obs[rows, 0], r=step.r_t[rows],
                            terminated=ids[rows][step.terminated[rows]] - 3 * g)
            asm.observe(sub, v[rows])
            asm.act(sub, a[rows], version)
            made[g] += asm.pop_batches()
    assert len(bundles) == min(len(m) for m in made) >= 5
    for i, bundle in enumerate(bundles):
        assert len(bundle) == 2
        for g, batch in enumerate(bundle):
            want = made[g][i]
            assert set((batch.obs[:, 0] % 100).astype(int)) <= {3 * g, 3 * g + 1, 3 * g + 2}
            for got_field, want_field in ((batch.obs, want.obs), (batch.a, want.a),
                                          (batch.R, want.R), (batch.version, want.version)):
                np.testing.assert_array_equal(got_field, want_field)
