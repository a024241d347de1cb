"""One process's training: :func:`train_single` runs simulators, predictor, trainer and
optimizer in this process, on a :class:`LocalParameterServer`.

``dba3c train`` as a library call, for the command line and the submitit job alike, is
:func:`dba3c.distributed.run.train`: it calls :func:`train_single` for a world of one rank,
and plays this process's role otherwise.

The run directory is locked (:class:`~dba3c.training.lock.RunLock`) before anything in it
is read; everything that can be refused (config, checkpoint, model shape) is checked before
it is written.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import replace

import numpy as np

from dba3c.config import Config
from dba3c.core import Params
from dba3c.cpus import rank_lines, this_cpu_precision
from dba3c.distributed.roles import emulated_roles
from dba3c.distributed.shard import ShardServer
from dba3c.errors import UserError
from dba3c.games.envs import env_spaces, make_env_pool
from dba3c.learning.models import NetSpec, make_net_spec
from dba3c.learning.optim import Optimizer, make_optimizer
from dba3c.learning.rules import OptimizerState
from dba3c.training import checkpoint
from dba3c.training.chief import Chief
from dba3c.training.lock import RunLock
from dba3c.training.profiling import WorkerLaps
from dba3c.training.report import WorkerReport


class LocalParameterServer:
    """The whole parameter vector in this process: the single-node trainer's
    :class:`~dba3c.core.ParameterClient` (and :class:`~dba3c.core.WorkersClient`). It is a
    parameter server's own :class:`~dba3c.distributed.shard.ShardServer` holding all of theta
    in sync mode with ``workers`` replicas: one worker's gradient is applied as it comes; with
    W emulated workers (``dist.emulate_workers``) the step's first W - 1 gradients are
    offered and the W-th pushed, and their mean is applied, as a parameter server of W
    workers applies it (a non-finite gradient or mean is skipped, as
    the shard server skips it)."""

    def __init__(self, theta: np.ndarray, opt_state: OptimizerState, version: int,
                 optimizer: Optimizer, workers: int = 1):
        self.shard = ShardServer(theta, opt_state, version, mode="sync", replicas=workers,
                                 optimizer=optimizer)

    @property
    def theta(self) -> np.ndarray:
        """The parameters (the store's own vector, updated in place)."""
        return self.shard.theta_shard

    @property
    def opt_state(self) -> OptimizerState:
        """The update rule's statistics."""
        return self.shard.opt_state

    @property
    def version(self) -> int:
        """Global steps applied."""
        return self.shard.version

    @property
    def nonfinite_skipped(self) -> int:
        """Updates skipped because the (mean) gradient was not finite."""
        return self.shard.stats.nonfinite_skipped

    def pull(self) -> Params:
        """The current parameters."""
        return Params(self.version, self.theta.copy())

    def offer(self, version: int, grad: np.ndarray) -> None:
        """One of the step's gradients but the last (computed at ``version``, the current
        one): added to the step's sum."""
        assert version == self.version, "one process trains on the parameters it was given"
        if self.shard.offer(version, grad):
            raise RuntimeError(f"a step takes {self.shard.replicas} gradients: the last one "
                               f"is pushed, not offered")

    def push(self, version: int, grad: np.ndarray) -> Params:
        """The step's last gradient (computed at ``version``, the current one): apply the
        optimizer to the mean of the step's gradients and return the next parameters."""
        assert version == self.version, "one process trains on the parameters it was given"
        if not self.shard.offer(version, grad):
            raise RuntimeError(f"a step takes {self.shard.replicas} gradients: fewer were "
                               f"offered before this push")
        return Params(self.version, self.theta.copy(), self.shard.nonfinite_streak)


def train_single(cfg: Config, laps: WorkerLaps | None = None, job: str | None = None) -> dict:
    """The single-node BA3C trainer: simulators, predictor, trainer and optimizer in one
    process. Returns the run summary. ``laps``: where the worker's threads time their
    sections (``dba3c bench profile`` reads them while it runs); ``job``: the Slurm job
    this process runs in (recorded with the run directory's lock)."""
    if cfg.synthetic.enabled:
        raise UserError("synthetic.enabled=true needs parameter-server ranks: run it with "
                        "`dba3c launch CONFIG --workers W` (world size 1 computes for real)")
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    with RunLock(cfg.run.dir, job):
        return _train(cfg, spec, checkpoint.load_start(cfg, spec), laps)


def _train(cfg: Config, spec: NetSpec, start: checkpoint.StartState,
           laps: WorkerLaps | None) -> dict:
    """:func:`train_single` from ``start``, the run directory locked."""
    # TensorFlow is imported here, after the config checks, not with this module: the chief
    # of a synthetic-compute run imports none
    from dba3c.learning.learner import Learner
    from dba3c.training.worker import Worker

    # W emulated workers (dist.emulate_workers): W groups of env.num_envs simulators in one
    # pool, one mini-batch from each a step; the ranks they have in the real W-worker run
    groups = emulated_roles(cfg).workers
    workers = len(groups)
    env = replace(cfg.env, num_envs=workers * cfg.env.num_envs,
                  batch_size=workers * cfg.env.batch_size)
    role = ("chief+worker" if workers == 1 else
            f"chief+worker emulating {workers} sync workers, {workers} x {cfg.env.num_envs} "
            f"simulators")
    print("\n".join(rank_lines(0, role, env, cfg.train, ranks_on_node=1,
                              precision=cfg.model.precision)), file=sys.stderr, flush=True)
    store = LocalParameterServer(start.theta, start.opt_state, start.step, make_optimizer(cfg),
                                 workers)
    with Chief(cfg, start.ckpt, spec.layout(), num_workers=workers,
               hosts=[socket.gethostname()], changes=start.changes) as chief, \
            chief.evaluator_thread(spec) as evaluator:
        chief.install_signal_handlers()
        if workers > 1:
            chief.extra["dist/replicas"] = workers  # perf/effective_batch: W x batch_size
        pool = None if cfg.debug.synthetic_data else make_env_pool(env, cfg.model)
        learner = Learner(spec, cfg.train, start.theta,
                          precision=this_cpu_precision(cfg.model.precision).dtype)
        worker = Worker(cfg, 0, learner, pool, laps, groups)

        def save(step: int) -> None:
            chief.save_checkpoint(step, [store.theta], [store.opt_state.m_shard],
                                  [store.opt_state.v_shard], store.opt_state.count)

        def after_step(params: Params, report: WorkerReport) -> bool:
            chief.worker_report(0, report)
            chief.extra["train/nonfinite_skipped"] = store.nonfinite_skipped
            chief.on_step(params.version)
            if chief.checkpoint_due(params.version):
                save(params.version)
            if evaluator is not None:
                for evaluation in evaluator.after_step(params.version, params.theta):
                    chief.on_eval(evaluation)
            return chief.stop_reason is not None

        worker.train(store, after_step)
        if store.version > chief.start_step:
            save(store.version)
        chief.finish_evaluations(evaluator, Params(store.version, store.theta))
    return chief.summary
