"""One worker: local asynchronous BA3C.

An actor thread plays ``env.num_envs`` simulators: receive a batch of observations, predict
for all of them in one forward pass, send the sampled actions back, and fold the outcome into
n-step data points. Full mini-batches go through a bounded queue to the trainer loop, which
runs in the calling (main) thread: gradient on the newest parameters, push it to the
parameter store, load the parameters it returns. Simulation and prediction keep going while
the trainer computes or waits for parameters.

A worker that emulates W synchronous workers (``dist.emulate_workers``) plays W groups of
``env.num_envs`` simulators in one pool; each group makes its own mini-batches
(:class:`~dba3c.learning.rollout.GroupedAssembler`), and a step computes one gradient per
group (each clipped, as on its own worker) and hands them all to the store, which averages
them as a parameter server does.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from dba3c.config import Config
from dba3c.core import ParameterClient, Params, WorkersClient
from dba3c.errors import TrainingError
from dba3c.games.envs import EnvPool, ScoreTracker
from dba3c.learning.rl import sample_actions
from dba3c.learning.rollout import Batch, GroupedAssembler
from dba3c.training.faults import with_faults, with_rank_faults
from dba3c.training.profiling import Laps, WorkerLaps
from dba3c.training.report import Losses, Seconds, WorkerReport

if TYPE_CHECKING:  # TensorFlow: synthetic-compute workers (dba3c.distributed.synthetic) import none
    from dba3c.learning.learner import Learner
    from dba3c.learning.models import NetSpec

AfterStep = Callable[[Params, WorkerReport], bool]
BeforeForward = Callable[[int], None]
"""Called before stage b's forward pass (b = 0, 1, ...): its parameters may still arrive."""
AfterBackward = Callable[[int, np.ndarray], None]
"""Called with bucket b's gradient once the backward pass made it (the last bucket first)."""
StagedInput = tuple[Batch, BeforeForward, AfterBackward]
"""A mini-batch and the staged gradient's hooks (:meth:`Worker.staged_gradient`)."""


class Actor(threading.Thread):
    """Simulators + batched predictor, producing bundles into ``out``: one mini-batch of each
    group of simulators (a list of one Batch for a worker that emulates no others)."""

    # sections of the loop (see _loop) that make up time/predict and time/emulate
    PREDICT_SECTIONS = ("predict", "sample", "send")
    EMULATE_SECTIONS = ("emulator recv", "copy obs")

    def __init__(self, pool: EnvPool, learner: Learner, assembler: GroupedAssembler,
                 out: queue.Queue, *, seed: int, episodic_life: bool,
                 laps: Laps | None = None):
        super().__init__(name="actor", daemon=True)
        self.pool, self.learner, self.assembler, self.out = pool, learner, assembler, out
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.scores = ScoreTracker(pool.num_envs, episodic_life)
        self.env_frames = 0
        self.laps = laps or Laps()
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # reported by the trainer loop
            self.error = e

    @property
    def t_predict(self) -> float:
        """Seconds spent predicting, sampling and sending actions."""
        return sum(self.laps.seconds.get(k, 0.0) for k in self.PREDICT_SECTIONS)

    @property
    def t_emulate(self) -> float:
        """Seconds spent waiting for the simulators' next batch and copying it."""
        return sum(self.laps.seconds.get(k, 0.0) for k in self.EMULATE_SECTIONS)

    def _loop(self) -> None:
        step = self.pool.reset(self.seed)
        lap = self.laps.lap
        self.laps.start()
        while not self.stopping.is_set():
            # pi(.|s_{t+1}), V(s_{t+1}): one pass, on the parameters of one version
            pi, v, version = self.learner.predict_with_version(step.obs)
            lap("predict")
            a_t = sample_actions(pi, self.rng)
            lap("sample")
            self.pool.send(a_t)
            lap("send")
            self.assembler.observe(step, v)  # close transitions that led to these states
            self.assembler.act(step, a_t, version)
            bundles = self.assembler.pop_bundles()
            lap("assemble")
            for bundle in bundles:
                self._put(bundle)
            lap("queue put")
            step = self.pool.recv()
            lap("emulator recv")
            step.obs = step.obs.copy()
            lap("copy obs")
            self.env_frames += len(step.env_ids) * self.pool.frames_per_step
            self.scores.update(step)
            lap("scores")

    def _put(self, bundle: list[Batch]) -> None:
        while not self.stopping.is_set():
            try:
                self.out.put(bundle, timeout=0.1)
                return
            except queue.Full:
                continue


class Worker:
    """The trainer loop of one rank, fed by an :class:`Actor` or by synthetic batches.

    Args:
      cfg: the whole Config. rank: this rank (seeds, fault injection).
      learner: the network. pool: the simulators, or None with ``debug.synthetic_data``.
      groups: the ranks of the workers this one stands for, one group of simulators and one
        mini-batch a step each (``dist.emulate_workers``: the W workers' ranks in the real
        run, :func:`~dba3c.distributed.roles.emulated_roles`, whose synthetic mini-batches
        they get); None: this rank alone.
    """

    def __init__(self, cfg: Config, rank: int, learner: Learner, pool: EnvPool | None,
                 laps: WorkerLaps | None = None, groups: tuple[int, ...] | None = None):
        self.cfg, self.rank, self.learner = cfg, rank, learner
        self.groups = groups or (rank,)
        self.laps = laps or WorkerLaps()
        self.batches: queue.Queue = queue.Queue(maxsize=cfg.train.queue_size)
        self.actor = None
        if pool is not None:
            if pool.num_envs % len(self.groups):
                raise ValueError(f"{pool.num_envs} simulators do not split into "
                                 f"{len(self.groups)} groups")
            assembler = GroupedAssembler(len(self.groups), pool.num_envs // len(self.groups),
                                         t_max=cfg.train.t_max, gamma=cfg.train.gamma,
                                         reward_clip=cfg.train.reward_clip,
                                         batch_size=cfg.train.batch_size)
            self.actor = Actor(pool, learner, assembler, self.batches,
                               seed=cfg.run.seed * 1000 + rank,
                               episodic_life=cfg.env.episodic_life, laps=self.laps.actor)
        self.data_points = 0
        self.t_compute = self.t_wait_data = self.t_wait_params = 0.0
        self.next_batches = (self._synthetic_batches if self.actor is None
                             else self._actor_batches)
        """The next step's mini-batches, one per group, for the parameters of a version
        (waits for the actor)."""
        self._gradient = with_faults(cfg.debug, rank, self.compute_gradient)
        self._staged_gradient = with_rank_faults(cfg.debug, rank, self.compute_staged_gradient)

    def train(self, client: ParameterClient, after_step: AfterStep) -> Params | None:
        """Train until the store ends the run (push returns None) or ``after_step`` returns
        True. Returns the last parameters received (None if the store ended the run)."""
        params = self.start(client)
        if self.cfg.train.reached_max_steps(params.version):
            return params
        try:
            return self.train_from(client, after_step, params)
        finally:
            self.stop()

    def train_from(self, client: ParameterClient, after_step: AfterStep, params: Params,
                   max_steps: int | None = None) -> Params | None:
        """Serial steps from ``params`` (loaded, the actor started) until the store ends the
        run (None), ``after_step`` returns True or ``max_steps`` steps were made; the last
        parameters received. Leaves the actor running."""
        lap = self.laps.trainer.lap
        for _ in itertools.count() if max_steps is None else range(max_steps):
            batches = self.next_batches(params.version)
            lap("wait data")
            grad, losses = self.step_gradient(client, batches, params.version)
            lap("gradient")
            t0 = time.perf_counter()
            new = client.push(params.version, grad)
            self.t_wait_params += time.perf_counter() - t0
            lap("push")  # Adam in one process, the round trip to the PS otherwise
            if new is None:
                return None
            self.check_streak(new.nonfinite_streak, new.version)
            # updates since acting
            lag = float(params.version - np.mean([b.version.mean() for b in batches]))
            params = new
            self.learner.set_params(params.theta, params.version)
            lap("assign")
            done = after_step(params, self.report(losses, lag))
            lap("after step (report, metrics, checkpoints)")
            if done:
                break
        return params

    def start(self, client: ParameterClient) -> Params:
        """The first parameters loaded and the actor started (unless the run is over: a
        finished run started again)."""
        params = client.pull()
        if self.cfg.train.reached_max_steps(params.version):
            self.stop()
            return params
        self.learner.set_params(params.theta, params.version)
        if self.actor is not None:
            self.actor.start()
        self.laps.trainer.start()
        return params

    def check_streak(self, nonfinite_streak: int, version: int) -> None:
        """Fail the run after ``train.max_nonfinite`` skipped updates in a row."""
        if nonfinite_streak >= self.cfg.train.max_nonfinite:
            raise TrainingError(
                f"{nonfinite_streak} consecutive updates had a non-finite "
                f"gradient (train.max_nonfinite={self.cfg.train.max_nonfinite}); "
                f"stopped at step {version}, the last checkpoint is intact")

    def stop(self) -> None:
        """Stop the actor thread and the simulators."""
        if self.actor is not None and self.actor.is_alive():
            self.actor.stopping.set()
            self.actor.join(timeout=10)
            self.actor.pool.close()
        elif self.actor is not None and self.actor.ident is None:  # never started
            self.actor.pool.close()

    def next_batch(self, version: int) -> Batch:
        """The next mini-batch of a worker of one group (:attr:`next_batches`)."""
        [batch] = self.next_batches(version)
        return batch

    def _synthetic_batches(self, version: int) -> list[Batch]:
        return [synthetic_batch(self.learner.spec, self.cfg.train.batch_size,
                                (self.cfg.run.seed, rank, version)) for rank in self.groups]

    def _actor_batches(self, version: int) -> list[Batch]:
        """The actor's next bundle (``version``: the synthetic data's key, unused here)."""
        actor = self.actor
        assert actor is not None, "chosen at start-up only with simulators"
        t0 = time.perf_counter()
        while True:
            if actor.error is not None:
                raise RuntimeError(f"actor thread failed: {actor.error!r}") from actor.error
            try:
                bundle = self.batches.get(timeout=0.5)
                break
            except queue.Empty:
                continue
        self.t_wait_data += time.perf_counter() - t0
        return bundle

    def step_gradient(self, client: ParameterClient, batches: list[Batch],
                      version: int) -> tuple[np.ndarray, dict]:
        """The gradient of a step at ``version`` and its losses: of its one mini-batch, or
        (emulated workers) of each group's, each by :meth:`gradient` (clipped, as on its own
        worker); all but the last go to the store as they are made (``client.offer``: it
        sums them as a parameter server sums its workers'), the last is returned for
        ``push``, and the losses are the groups' mean."""
        *firsts, last = batches
        every_losses = []
        if firsts:
            if not isinstance(client, WorkersClient):
                raise TypeError(f"{len(batches)} mini-batches a step need a store that takes "
                                f"several gradients a step (WorkersClient)")
            for batch in firsts:
                grad, losses = self.gradient(batch, version)
                client.offer(version, grad)
                every_losses.append(losses)
        grad, losses = self.gradient(last, version)
        if not every_losses:
            return grad, losses
        every_losses.append(losses)
        return grad, {k: float(np.mean([each[k] for each in every_losses])) for k in losses}

    def gradient(self, batch: Batch, version: int) -> tuple[np.ndarray, dict]:
        """The gradient of ``batch`` on the parameters of ``version`` and the losses, with this
        rank's injected faults (:mod:`dba3c.training.faults`), timed as compute and counted."""
        t0 = time.perf_counter()
        grad, losses = self._gradient(batch, version)
        self.t_compute += time.perf_counter() - t0
        self.data_points += len(batch)
        return grad, losses

    def staged_gradient(self, batch: Batch, before_forward: BeforeForward,
                        after_backward: AfterBackward, version: int) -> dict:
        """The gradient computed stage by stage (:meth:`compute_staged_gradient`), with this
        rank's injected faults, timed as compute less its waits for parameters (which count
        as those) and counted; returns the losses."""
        t0, waited = time.perf_counter(), self.t_wait_params
        losses = self._staged_gradient((batch, before_forward, after_backward), version)
        self.t_compute += time.perf_counter() - t0 - (self.t_wait_params - waited)
        self.data_points += len(batch)
        return losses

    def compute_gradient(self, batch: Batch, version: int) -> tuple[np.ndarray, dict]:
        """The learner's gradient and losses on ``batch``; NaN everywhere if not finite, so
        every shard skips the update. ``version`` is for subclasses (synthetic gradients)."""
        grad, losses = self.learner.gradient(batch.obs, batch.a, batch.R)
        if not np.isfinite(grad).all():
            grad[:] = np.nan
        return grad, losses

    def compute_staged_gradient(self, step: StagedInput, version: int) -> dict:
        """The learner's staged gradient (``Learner.staged_gradient``): ``before_forward(b)``
        before stage b's forward pass, ``after_backward(b, g_b)`` as each bucket is made."""
        batch, before_forward, after_backward = step
        return self.learner.staged_gradient(batch.obs, batch.a, batch.R, before_forward,
                                            after_backward)

    def report(self, losses: dict[str, float], policy_lag: float) -> WorkerReport:
        """This worker's cumulative counters and latest ``loss/*`` losses."""
        actor = self.actor
        return WorkerReport(
            data_points=self.data_points,
            env_frames=actor.env_frames if actor else 0,
            episodes=actor.scores.num_episodes if actor else 0,
            online_score=actor.scores.online_score() if actor else None,
            policy_lag=policy_lag,
            losses=Losses.from_metrics(losses),
            seconds=Seconds(compute=self.t_compute, wait_data=self.t_wait_data,
                            wait_params=self.t_wait_params,
                            predict=actor.t_predict if actor else 0.0,
                            emulate=actor.t_emulate if actor else 0.0))


def synthetic_batch(spec: NetSpec, batch_size: int, key: tuple) -> Batch:
    """A deterministic random mini-batch for ``key`` (e.g. (seed, rank, version)): the same
    data in every process layout, for equivalence tests."""
    rng = np.random.default_rng(list(key))
    obs: np.ndarray
    if spec.kind == "mlp":
        obs = rng.normal(size=(batch_size, *spec.obs_shape)).astype(np.float32)
    else:
        obs = rng.integers(0, 256, (batch_size, *spec.obs_shape), dtype=np.uint8)
    return Batch(obs, rng.integers(0, spec.num_actions, batch_size).astype(np.int32),
                 rng.normal(size=batch_size).astype(np.float32),
                 np.full(batch_size, key[-1], np.int64))
