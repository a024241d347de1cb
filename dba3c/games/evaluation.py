"""Evaluation: a fixed number of games with frozen parameters, real scores.

Each of the pool's envs plays its share of the games (so short games are not over-counted),
greedy (argmax) unless asked to sample, with random no-op starts and a frame cap per game.
During training, ``eval.stop_below_target`` ends an evaluation once its mean can no longer
reach ``eval.target_score`` (:func:`stop_rule`): the time to the target is unchanged, and an
evaluation far below it costs a fraction of its games.
"""

from __future__ import annotations

import functools
import itertools
import queue
import threading
from collections.abc import Callable, Sequence

import numpy as np

from dba3c.config import Config
from dba3c.core import Evaluation, Step
from dba3c.games.envs import EnvPool, ScoreTracker, make_env_pool
from dba3c.games.schedule import EvalSchedule
from dba3c.games.scores import MAX_SCORE, below_target
from dba3c.learning.learner import Learner, as_tensors
from dba3c.learning.models import NetSpec, active_units, hidden_activations
from dba3c.learning.params import unflatten
from dba3c.learning.rl import sample_actions

Predict = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
OnGame = Callable[[int, float], None]
OnFrames = Callable[[int], None]
GiveUp = Callable[[Sequence[float]], bool]


def stop_rule(cfg: Config) -> GiveUp | None:
    """``eval.stop_below_target``'s test of the games played so far: True once
    ``eval.episodes`` games can no longer average ``eval.target_score`` (None when off)."""
    if not cfg.eval.stop_below_target:
        return None
    return functools.partial(below_target, episodes=cfg.eval.episodes,
                             target=cfg.eval.target_score, max_score=MAX_SCORE[cfg.env.id])


def play(predict: Predict, pool: EnvPool, episodes: int, *, greedy: bool, seed: int,
         on_frame: Callable[[Step, float], None] | None = None, on_game: OnGame | None = None,
         on_frames: OnFrames | None = None, should_stop: Callable[[], bool] | None = None,
         give_up: GiveUp | None = None) -> list[float]:
    """Play exactly ``episodes`` games on ``pool`` (synchronous: batch = all envs).

    Args:
      predict: obs [B, ...] -> (pi [B, A], v [B]).
      on_frame: optional callback(step, score of env 0 including this step) for video;
        called for every step of env 0's games.
      on_game: optional callback(number of games so far, score) when a game counts.
      on_frames: optional callback(emulator frames played so far, all envs) after each
        batch: an evaluation's progress, which moves while no game ends.
      should_stop: optional callback polled every 50 steps; True abandons the evaluation.
      give_up: optional test of the scores so far (:func:`stop_rule`); True ends the
        evaluation with them.
    Returns:
      the real score of each game, in the order they ended (fewer if abandoned or given up).
    """
    rng = np.random.default_rng(seed)
    quota = np.bincount(np.arange(episodes) % pool.num_envs, minlength=pool.num_envs)
    done = np.zeros(pool.num_envs, np.int64)
    tracker = ScoreTracker(pool.num_envs)
    scores: list[float] = []
    step = pool.reset(seed)
    for i in itertools.count():
        if len(scores) >= episodes or (give_up and give_up(scores)) or \
                (should_stop and i % 50 == 0 and should_stop()):
            break
        pi, _ = predict(step.obs)
        pool.send(sample_actions(pi, rng, greedy))
        step = pool.recv()
        if on_frames is not None:
            on_frames((i + 1) * pool.batch_size * pool.frames_per_step)
        if on_frame is not None and done[0] < quota[0]:
            on_frame(step, tracker.score[0] + float(np.sum(step.r_t[step.env_ids == 0])))
        for env, score in tracker.update(step):
            if done[env] < quota[env]:
                scores.append(score)
                done[env] += 1
                if on_game is not None:
                    on_game(len(scores), score)
    return scores


def make_eval_pool(cfg: Config, episodes: int) -> EnvPool:
    """Simulators for evaluation: whole games (no episodic life), no-op starts, frame cap."""
    n = min(cfg.eval.num_envs, episodes)
    return make_env_pool(cfg.env, cfg.model, num_envs=n, batch_size=n,
                         noop_max=cfg.eval.noop_max, max_episode_frames=cfg.eval.max_frames,
                         episodic_life=False)


def evaluate_params(cfg: Config, spec: NetSpec, theta: np.ndarray, episodes: int, seed: int,
                    on_game: OnGame | None = None) -> list[float]:
    """Scores of ``episodes`` games played with the parameters ``theta``."""
    learner = Learner(spec, cfg.train, theta)
    pool = make_eval_pool(cfg, episodes)
    try:
        return play(learner.predict, pool, episodes, greedy=cfg.eval.greedy, seed=seed,
                    on_game=on_game)
    finally:
        pool.close()


def record_game(cfg: Config, spec: NetSpec, theta: np.ndarray,
                seed: int) -> tuple[float, list[np.ndarray]]:
    """Play one evaluation game; return its score and one video frame per step
    (uint8 [H, W, 3], the running score drawn on each)."""
    from dba3c.games.video import frame_image

    learner = Learner(spec, cfg.train, theta)
    pool = make_eval_pool(cfg, 1)
    frames: list[np.ndarray] = []
    try:
        (score,) = play(learner.predict, pool, 1, greedy=cfg.eval.greedy, seed=seed,
                        on_frame=lambda step, s: frames.append(
                            frame_image(step.obs[0], s, len(frames) + 1)))
    finally:
        pool.close()
    return score, frames


def random_play_observations(cfg: Config, count: int, seed: int) -> np.ndarray:
    """``count`` observations of the configured game under uniform random play: up to 8
    evaluation simulators (``eval.num_envs``; no-op starts, whole games), every 4th step of
    each, so that consecutive frames do not dominate."""
    pool = make_eval_pool(cfg, 8)
    rng = np.random.default_rng(seed)
    kept: list[np.ndarray] = []
    try:
        step, n = pool.reset(seed), 0
        for i in itertools.count():
            if n >= count:
                break
            pool.send(rng.integers(0, pool.num_actions, len(step.env_ids)))
            step = pool.recv()
            if i % 4 == 0:
                kept.append(step.obs.copy())
                n += len(step.obs)
    finally:
        pool.close()
    return np.concatenate(kept)[:count]


def active_unit_counts(spec: NetSpec, theta: np.ndarray,
                       obs: np.ndarray) -> list[dict[str, int | str]]:
    """Per trunk layer of the network with parameters ``theta``: its name, its units, and
    how many of them are active (:func:`~dba3c.learning.models.active_units`) on ``obs``.
    A ReLU unit active on none of them passes no gradient on them."""
    outputs = hidden_activations(spec, as_tensors(unflatten(spec.layout(), theta)), obs)
    return [{"layer": stage.name, "units": int(out.shape[-1]),
             "active": active_units(out.numpy())}
            for stage, out in zip(spec.stages(), outputs)]


class UnitProbe:
    """``eval.probe_frames`` observations of random play (:func:`random_play_observations`,
    seed ``run.seed``: the frames ``dba3c units --frames N --seed S`` uses), collected at
    the first count (after the first evaluation's games: an evaluator starts playing at
    once), on which every evaluation of a run counts each trunk layer's active units."""

    def __init__(self, cfg: Config, spec: NetSpec):
        self.cfg, self.spec = cfg, spec
        self._obs: np.ndarray | None = None

    def active_units(self, theta: np.ndarray) -> tuple[int, ...]:
        """Each trunk layer's active units with parameters ``theta``, in order (none:
        ``eval.probe_frames`` is 0)."""
        count = self.cfg.eval.probe_frames
        if not count:
            return ()
        if self._obs is None:
            self._obs = random_play_observations(self.cfg, count, self.cfg.run.seed)
        return tuple(int(layer["active"])
                     for layer in active_unit_counts(self.spec, theta, self._obs))


class BackgroundEvaluator(threading.Thread):
    """Evaluates parameter snapshots in a thread of the training process (single-node runs,
    and the chief without an evaluator rank).

    ``after_step`` submits the steps that ``eval.every`` asks for (:class:`EvalSchedule`;
    its ``last`` the final parameters, ``start_step`` the step the run started from);
    ``submit`` replaces any snapshot not yet started (the newest wins); finished evaluations
    are collected with ``results``. It shares the CPU with training: each evaluation costs
    about ``eval.episodes`` games of forward passes (fewer with ``eval.stop_below_target``).
    """

    def __init__(self, cfg: Config, spec: NetSpec, start_step: int):
        super().__init__(name="evaluator", daemon=True)
        self.cfg, self.spec = cfg, spec
        self._inbox: queue.Queue = queue.Queue(maxsize=1)
        self._outbox: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        self.error: BaseException | None = None
        self.schedule = EvalSchedule(cfg.eval.every, self.submit, at_end=cfg.eval.at_end,
                                     start=start_step)
        self.finished = -1  # the newest step whose scores are in the outbox
        self.games = 0  # games the evaluation in progress has played
        self.frames = 0  # and emulator frames

    def after_step(self, step: int, theta: np.ndarray) -> list[Evaluation]:
        """Submit ``theta`` if ``step`` is due for evaluation; return the evaluations
        finished since the last call, as :meth:`results`."""
        self.schedule.after_step(step, theta)
        return self.results()

    def submit(self, step: int, theta: np.ndarray) -> None:
        """Ask for an evaluation of ``theta`` (copied) at ``step``."""
        try:
            self._inbox.get_nowait()
        except queue.Empty:
            pass
        self._inbox.put((step, theta.copy()))

    def in_progress(self) -> int | None:
        """The step of the newest evaluation asked for and not finished (None: none)."""
        step = self.schedule.submitted
        return step if step > self.finished else None

    def results(self) -> list[Evaluation]:
        """Evaluations finished since the last call."""
        if self.error is not None:
            raise RuntimeError(f"evaluator failed: {self.error!r}") from self.error
        out = []
        while not self._outbox.empty():
            out.append(self._outbox.get())
        return out

    def stop(self, timeout_s: float = 30.0) -> None:
        """Abandon any evaluation in progress, close the simulators and end the thread."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        try:
            self._inbox.get_nowait()
        except queue.Empty:
            pass
        self._inbox.put(None)  # wakes the thread if it waits for a snapshot
        self.join(timeout_s)

    def _played(self, games: int, _score: float) -> None:
        self.games = games

    def _framed(self, frames: int) -> None:
        self.frames = frames

    def run(self) -> None:
        pool = None
        try:
            learner = Learner(self.spec, self.cfg.train, self.spec.init_params(0))
            probe = UnitProbe(self.cfg, self.spec)
            pool = make_eval_pool(self.cfg, self.cfg.eval.episodes)
            give_up = stop_rule(self.cfg)
            while not self._stopping.is_set():
                item = self._inbox.get()
                if item is None:
                    break
                step, theta = item
                learner.set_params(theta)
                self.games = self.frames = 0
                scores = play(learner.predict, pool, self.cfg.eval.episodes,
                              greedy=self.cfg.eval.greedy, seed=self.cfg.run.seed + step,
                              on_game=self._played, on_frames=self._framed,
                              should_stop=self._stopping.is_set, give_up=give_up)
                if not self._stopping.is_set():
                    self._outbox.put(Evaluation(step, tuple(scores), probe.active_units(theta)))
                    self.finished = step
        except BaseException as e:
            self.error = e
        finally:
            if pool is not None:
                pool.close()
