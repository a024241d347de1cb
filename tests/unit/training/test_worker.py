"""The worker's trainer loop (dba3c.training.worker), in-process: a worker that emulates W
workers (dist.emulate_workers) trains each step on one mini-batch of each of its W groups
of simulators."""

from __future__ import annotations

from typing import cast

import numpy as np

from dba3c.core import Step
from dba3c.games.envs import EnvPool, env_spaces
from dba3c.learning.learner import Learner
from dba3c.learning.models import make_net_spec
from dba3c.preset import load_config
from dba3c.training.worker import Worker


class EnvIdPool:
    """``num_envs`` scripted simulators stepped asynchronously: each recv returns a random
    half of them; an observation is (100 t + env id, 0, 0, 0) at the env's step t, and an
    episode ends now and then."""

    frames_per_step = 1

    def __init__(self, num_envs: int, seed: int = 0):
        self.num_envs = num_envs
        self.rng = np.random.default_rng(seed)
        self.t = np.zeros(num_envs, np.int64)

    def _step(self, ids: np.ndarray) -> Step:
        self.t[ids] += 1
        obs = np.zeros((len(ids), 4), np.float32)
        obs[:, 0] = 100 * self.t[ids] + ids
        return Step(obs, np.ones(len(ids), np.float32), self.rng.random(len(ids)) < 0.05,
                    np.zeros(len(ids), bool), ids, np.ones(len(ids), np.int64))

    def reset(self, seed: int) -> Step:
        return self._step(np.arange(self.num_envs))

    def send(self, actions: np.ndarray) -> None:
        pass

    def recv(self) -> Step:
        return self._step(np.sort(self.rng.choice(self.num_envs, self.num_envs // 2,
                                                  replace=False)))

    def close(self) -> None:
        pass

    def as_pool(self) -> EnvPool:
        """This fake where a worker takes an EnvPool: it has what the actor uses."""
        return cast(EnvPool, self)


class UniformPolicy:
    """A learner's stand-in for the actor: uniform action probabilities, V = 0, version 0."""

    def predict_with_version(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        return np.full((len(obs), 2), 0.5, np.float32), np.zeros(len(obs), np.float32), 0

    def as_learner(self) -> Learner:
        """This fake where a worker takes a Learner: it has what the actor uses."""
        return cast(Learner, self)


def test_an_emulating_worker_steps_on_one_mini_batch_from_each_of_its_simulator_groups():
    """3 emulated workers (ranks 0, 2, 3 of the real run) of 4 simulators each: one pool of
    12, env e in group e // 4. Every step's mini-batches come from the 3 groups in order,
    each batch from its own group's envs alone, all of its data points new."""
    cfg = load_config("configs/cartpole.yaml", ["env.num_envs=4", "train.batch_size=6",
                                                "train.t_max=3"])
    worker = Worker(cfg, 0, UniformPolicy().as_learner(), EnvIdPool(12).as_pool(),
                    groups=(0, 2, 3))
    assert worker.actor is not None
    worker.actor.start()
    try:
        steps = [worker.next_batches(version) for version in range(8)]
    finally:
        worker.stop()
    seen: set[float] = set()
    for batches in steps:
        assert len(batches) == 3
        for group, batch in enumerate(batches):
            assert len(batch) == 6
            envs = set((batch.obs[:, 0] % 100).astype(int).tolist())
            assert envs <= set(range(4 * group, 4 * group + 4)), (group, envs)
            assert seen.isdisjoint(batch.obs[:, 0].tolist())  # no data point used twice
            seen.update(batch.obs[:, 0].tolist())


def test_emulated_workers_synthetic_mini_batches_are_those_of_the_real_runs_workers():
    """debug.synthetic_data: group g's mini-batch is keyed by the rank of the worker it
    stands for, as that worker's own is in the real run."""
    cfg = load_config("configs/cartpole.yaml", ["debug.synthetic_data=true",
                                                "train.batch_size=5"])
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    theta = spec.init_params(0)
    emulating = Worker(cfg, 0, Learner(spec, cfg.train, theta), None, groups=(0, 2))
    real = [Worker(cfg, rank, Learner(spec, cfg.train, theta), None) for rank in (0, 2)]
    for got, worker in zip(emulating.next_batches(7), real):
        want = worker.next_batch(7)
        assert np.array_equal(got.obs, want.obs) and np.array_equal(got.R, want.R)
