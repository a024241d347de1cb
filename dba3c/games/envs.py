"""Simulators behind one small interface, and per-env real-score tracking.

:class:`EnvPool` hides the difference between ale-py's C++ ``AtariVectorEnv`` (async: each
``recv`` returns the ``batch_size`` envs that finished stepping first, so emulation overlaps
prediction) and a gymnasium vector env (CartPole: every env, every step). Both use NEXT_STEP
autoreset: the step after a terminal one is a reset step whose action is ignored. With
``episodic_life`` a lost life is terminal too, but the game continues (no reset): the game
ends at its real game over (no lives left) or at the frame cap.
Rewards come out unclipped (real game scores); the learner clips.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from dba3c.config import Config, EnvConfig, ModelConfig, is_atari
from dba3c.core import Step
from dba3c.cpus import bound_cpus, niced_threads, simulator_threads


class EnvPool:
    """``num_envs`` simulators; ``reset`` once, then alternate ``send`` and ``recv``."""

    def __init__(self, env_id: str, num_envs: int, *, batch_size: int = 0, num_threads: int = 0,
                 frame_skip: int = 4, sticky_actions: float = 0.0, episodic_life: bool = False,
                 noop_max: int = 30, max_episode_frames: int = 108000, rgb: bool = False,
                 frame_size: int = 84, full_action_space: bool = False, nice: int = 0):
        self.atari = is_atari(env_id)
        self.num_envs = num_envs
        # ale-py's AtariVectorEnv (send/recv) or a gymnasium vector env (step): two APIs
        self._env: Any
        if self.atari:
            from ale_py.vector_env import AtariVectorEnv

            self.batch_size = batch_size or max(1, num_envs // 2)
            with niced_threads(nice):  # the emulator threads AtariVectorEnv starts
                self._env = AtariVectorEnv(
                    env_id, num_envs, batch_size=self.batch_size,
                    num_threads=simulator_threads(num_threads, num_envs, len(bound_cpus())),
                    frameskip=frame_skip, repeat_action_probability=sticky_actions,
                    # ale-py's own episodic_life restarts the game at every lost life;
                    # life_loss_info only makes a lost life terminal, and the game goes on
                    life_loss_info=episodic_life, noop_max=noop_max, reward_clipping=False,
                    max_num_frames_per_episode=max_episode_frames, grayscale=not rgb,
                    img_height=frame_size, img_width=frame_size,
                    full_action_space=full_action_space)
        else:
            import gymnasium as gym

            self.batch_size = num_envs
            self._env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync")
        self.obs_shape = tuple(self._env.single_observation_space.shape)
        self.num_actions = int(self._env.single_action_space.n)
        self.frames_per_step = frame_skip if self.atari else 1

    def reset(self, seed: int) -> Step:
        """Start every env (call once: a second reset of an async ALE pool is unsafe)."""
        obs, info = self._env.reset(seed=seed)
        return self._step(obs, np.zeros(len(obs)), np.zeros(len(obs), bool),
                          np.zeros(len(obs), bool), info)

    def send(self, actions: np.ndarray) -> None:
        """Actions for the envs of the last returned batch, in its order."""
        if self.atari:
            self._env.send(actions.astype(np.int32))
        else:
            self._pending = self._env.step(actions.astype(np.int64))

    def recv(self) -> Step:
        """The next batch of stepped envs."""
        if self.atari:
            return self._step(*self._env.recv())
        return self._step(*self._pending)

    def _step(self, obs: np.ndarray, r: np.ndarray, term: np.ndarray, trunc: np.ndarray,
              info: dict) -> Step:
        ids = info["env_id"] if self.atari else np.arange(self.num_envs)
        lives = info["lives"] if self.atari else np.ones(len(ids), np.int32)
        return Step(obs, np.asarray(r, np.float32), np.asarray(term, bool),
                    np.asarray(trunc, bool), np.asarray(ids), np.asarray(lives))

    def close(self) -> None:
        """Stop the simulators."""
        self._env.close()


def make_env_pool(env_cfg: EnvConfig, model_cfg: ModelConfig, *, num_envs: int | None = None,
                  batch_size: int | None = None, noop_max: int | None = None,
                  max_episode_frames: int | None = None,
                  episodic_life: bool | None = None) -> EnvPool:
    """An EnvPool from the ``env`` and ``model`` config sections (keywords override)."""
    return EnvPool(
        env_cfg.id, num_envs or env_cfg.num_envs,
        batch_size=env_cfg.batch_size if batch_size is None else batch_size,
        num_threads=env_cfg.num_threads, frame_skip=env_cfg.frame_skip,
        sticky_actions=env_cfg.sticky_actions,
        episodic_life=env_cfg.episodic_life if episodic_life is None else episodic_life,
        noop_max=env_cfg.noop_max if noop_max is None else noop_max,
        max_episode_frames=max_episode_frames or env_cfg.max_episode_frames,
        rgb=model_cfg.obs == "rgb", frame_size=model_cfg.frame_size,
        full_action_space=env_cfg.full_action_space, nice=env_cfg.nice)


class ScoreTracker:
    """Real (unclipped) game scores per env; a game ends at a terminal with no lives left
    (with ``episodic_life`` a lost life is terminal for learning but not for the score)."""

    def __init__(self, num_envs: int, episodic_life: bool = False, window: int | None = None):
        self.episodic_life = episodic_life
        self.score = np.zeros(num_envs, np.float64)
        # one game per env (at least 10): simulators that start together end their games in
        # waves, shortest (and, in most games, lowest-scoring) first; a window of a few games
        # would follow the lengths within each wave, one per env spans a whole wave
        self.recent: deque[float] = deque(maxlen=window or max(10, num_envs))
        self.num_episodes = 0

    def update(self, step: Step) -> list[tuple[int, float]]:
        """Add one batch's rewards; return (env id, score) of the games that just ended."""
        ids = step.env_ids
        self.score[ids] += step.r_t
        game_over = step.lives <= 0 if self.episodic_life else True
        over = step.truncated | (step.terminated & game_over)
        finished = []
        for i in ids[over]:
            finished.append((int(i), float(self.score[i])))
            self.score[i] = 0.0
        self.recent.extend(score for _, score in finished)
        self.num_episodes += len(finished)
        return finished

    def online_score(self) -> float | None:
        """Mean real score of the last ``window`` finished games, by default as many as
        there are envs, at least 10 (None before the first)."""
        return float(np.mean(self.recent)) if self.recent else None


SpacesKey = tuple[str, bool, int, bool]  # env.id, RGB observations, frame side, full actions
Spaces = tuple[tuple[int, ...], int]  # observation shape, number of actions
_SPACES: dict[SpacesKey, Spaces] = {}  # per process: the config validator and trainer both ask


def spaces_key(cfg: Config) -> SpacesKey:
    """What an env's spaces depend on."""
    return cfg.env.id, cfg.model.obs == "rgb", cfg.model.frame_size, cfg.env.full_action_space


def env_spaces(cfg: Config) -> Spaces:
    """(observation shape, number of actions) of the configured env: one simulator is opened
    briefly, once per process, unless :func:`remember_spaces` was told them."""
    key = spaces_key(cfg)
    if key not in _SPACES:
        env_id, rgb, frame_size, full_action_space = key
        pool = EnvPool(env_id, 1, batch_size=1, rgb=rgb, frame_size=frame_size,
                       full_action_space=full_action_space)
        try:
            _SPACES[key] = pool.obs_shape, pool.num_actions
        finally:
            pool.close()
    return _SPACES[key]


def remember_spaces(key: SpacesKey, spaces: Spaces) -> None:
    """Take an env's spaces from a process that opened it: a synthetic rank then never
    imports gymnasium and ale-py (about 30 MB of its memory)."""
    _SPACES[key] = spaces
