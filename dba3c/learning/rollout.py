"""Turning the simulator stream into training data points.

Per env, transitions (s_t, a_t, r_t) accumulate into a rollout of at most ``t_max`` steps.
A rollout closes when it is full (bootstrap with V(s_{t+n}) predicted for the next state),
at a truncation (bootstrap with V of the final observation) or at a terminal (bootstrap 0).
The step after a terminal or truncated one is an autoreset step: its reward and the action
sent for the final observation are meaningless, so it never enters training data. (With
``env.episodic_life`` the step after a lost life is a real one; it is left out the same way,
one transition per life.)
Each data point is (s_t, a_t, R_t, version), version being the parameter version that acted.

:class:`GroupedAssembler` feeds the actor's simulators to one :class:`RolloutAssembler` per
worker: one group of envs a worker, W groups when one process emulates W workers
(``dist.emulate_workers``); a bundle, one mini-batch of every group, is a step's data.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from dba3c.core import Step
from dba3c.learning.rl import clip_rewards, n_step_returns


@dataclass
class Batch:
    """A training mini-batch. obs [B, ...]; a [B] int32; R [B] float32; version [B] int64."""

    obs: np.ndarray
    a: np.ndarray
    R: np.ndarray
    version: np.ndarray

    def __len__(self) -> int:
        return len(self.a)


class RolloutAssembler:
    """Collects per-env rollouts and emits mini-batches of ``batch_size`` data points."""

    def __init__(self, num_envs: int, *, t_max: int, gamma: float, reward_clip: float,
                 batch_size: int):
        self.t_max, self.gamma, self.reward_clip = t_max, gamma, reward_clip
        self.batch_size = batch_size
        self._rollouts: list[list[tuple]] = [[] for _ in range(num_envs)]
        self._pending: list[tuple | None] = [None] * num_envs  # (s_t, a_t, version)
        self._reset_next = np.zeros(num_envs, bool)
        self._ready: list[tuple] = []  # (s, a, R, version) data points not yet batched

    def observe(self, step: Step, v_tp1: np.ndarray) -> None:
        """Record the outcome of the last actions: rewards, episode ends, and V(s_{t+1})
        predicted for the new observations ``step.obs``."""
        r_t = clip_rewards(step.r_t, self.reward_clip)
        for k, env in enumerate(step.env_ids):
            pending = self._pending[env]
            if self._reset_next[env] or pending is None:
                self._reset_next[env] = False  # autoreset step: nothing to learn from
                continue
            s_t, a_t, version = pending
            terminal = bool(step.terminated[k])
            self._rollouts[env].append((s_t, a_t, float(r_t[k]), terminal, version))
            end = terminal or bool(step.truncated[k])
            if end or len(self._rollouts[env]) == self.t_max:
                self._close(env, 0.0 if terminal else float(v_tp1[k]))
            self._reset_next[env] = end

    def act(self, step: Step, a_t: np.ndarray, version: int) -> None:
        """Record the actions just sent for the observations of ``step``."""
        for k, env in enumerate(step.env_ids):
            self._pending[env] = (step.obs[k], int(a_t[k]), version)

    def _close(self, env: int, v_T: float) -> None:
        rollout = self._rollouts[env]
        r = np.array([x[2] for x in rollout])
        discount = np.array([0.0 if x[3] else self.gamma for x in rollout])
        R = n_step_returns(r, discount, v_T)
        self._ready += [(x[0], x[1], R_t, x[4]) for x, R_t in zip(rollout, R)]
        self._rollouts[env] = []

    def pop_batches(self) -> list[Batch]:
        """Every complete mini-batch assembled so far (oldest data first)."""
        batches = []
        while len(self._ready) >= self.batch_size:
            points, self._ready = self._ready[:self.batch_size], self._ready[self.batch_size:]
            batches.append(Batch(np.stack([p[0] for p in points]),
                                 np.array([p[1] for p in points], np.int32),
                                 np.array([p[2] for p in points], np.float32),
                                 np.array([p[3] for p in points], np.int64)))
        return batches


class GroupedAssembler:
    """The mini-batches of ``groups`` workers from one pool of ``groups x num_envs``
    simulators: env e is env ``e % num_envs`` of group ``e // num_envs``, and each group has
    its own :class:`RolloutAssembler`, so it makes its own mini-batches of ``batch_size`` from
    its own envs, as a worker does. :meth:`pop_bundles` hands out one mini-batch of every group
    at a time (each group's oldest first); a group ahead of the others keeps its batches until
    every group has one. One group: exactly a worker's :class:`RolloutAssembler`."""

    def __init__(self, groups: int, num_envs: int, *, t_max: int, gamma: float,
                 reward_clip: float, batch_size: int):
        self.num_envs = num_envs
        self.groups = [RolloutAssembler(num_envs, t_max=t_max, gamma=gamma,
                                        reward_clip=reward_clip, batch_size=batch_size)
                       for _ in range(groups)]
        self._made: list[deque[Batch]] = [deque() for _ in range(groups)]
        self._split: tuple[Step | None, list[tuple[int, np.ndarray | slice, Step]]] = (None, [])

    def observe(self, step: Step, v_tp1: np.ndarray) -> None:
        """:meth:`RolloutAssembler.observe` for each group's envs in ``step``."""
        for g, rows, sub in self._by_group(step):
            self.groups[g].observe(sub, v_tp1[rows])

    def act(self, step: Step, a_t: np.ndarray, version: int) -> None:
        """:meth:`RolloutAssembler.act` for each group's envs in ``step``."""
        for g, rows, sub in self._by_group(step):
            self.groups[g].act(sub, a_t[rows], version)

    def pop_bundles(self) -> list[list[Batch]]:
        """Every complete bundle so far: one mini-batch of each group, in group order."""
        for made, group in zip(self._made, self.groups):
            made.extend(group.pop_batches())
        ready = min(len(made) for made in self._made)
        return [[made.popleft() for made in self._made] for _ in range(ready)]

    def _by_group(self, step: Step) -> list[tuple[int, np.ndarray | slice, Step]]:
        """(group, the rows of ``step`` that are its envs, those rows as the group's Step);
        the same split for observe and act of one step."""
        if len(self.groups) == 1:
            return [(0, slice(None), step)]
        if self._split[0] is not step:
            self._split = (step, split_by_group(step, self.num_envs))
        return self._split[1]


def split_by_group(step: Step, num_envs: int) -> list[tuple[int, np.ndarray | slice, Step]]:
    """The envs of ``step`` by group of ``num_envs`` (env e is env ``e % num_envs`` of group
    ``e // num_envs``): (group, the rows of ``step``, those rows with the group's env ids)."""
    group = np.asarray(step.env_ids) // num_envs
    parts: list[tuple[int, np.ndarray | slice, Step]] = []
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        parts.append((int(g), rows, Step(step.obs[rows], step.r_t[rows], step.terminated[rows],
                                         step.truncated[rows], step.env_ids[rows] - g * num_envs,
                                         step.lives[rows])))
    return parts
