"""Training entry points: one process, or this process's role in a distributed world.

:func:`train` is ``dba3c train`` as a library call, for the command line and the submitit
job alike; the launcher reads the world size from its environment and passes it in.

The run directory is locked (:class:`~dba3c.training.lock.RunLock`) before anything in it
is read; everything that can be refused (config, checkpoint, model shape) is checked before
it is written.
"""

from __future__ import annotations

import socket
import sys

import numpy as np

from dba3c.config import Config
from dba3c.core import Params
from dba3c.cpus import rank_lines
from dba3c.errors import UserError
from dba3c.games.envs import env_spaces, make_env_pool
from dba3c.learning.models import NetSpec, make_net_spec
from dba3c.learning.optim import Optimizer, apply_update, make_optimizer
from dba3c.learning.rules import OptimizerState
from dba3c.training import checkpoint
from dba3c.training.chief import Chief
from dba3c.training.lock import RunLock
from dba3c.training.profiling import WorkerLaps
from dba3c.training.report import WorkerReport


class LocalParameterServer:
    """The whole parameter vector in this process: the single-node trainer's
    :class:`~dba3c.core.ParameterClient`. Every gradient is applied as it comes (through
    :func:`~dba3c.learning.optim.apply_update`, which skips a non-finite one)."""

    def __init__(self, theta: np.ndarray, opt_state: OptimizerState, version: int,
                 optimizer: Optimizer):
        self.theta, self.opt_state, self.version = theta, opt_state, version
        self.optimizer = optimizer
        self.nonfinite_streak = self.nonfinite_skipped = 0
        self._scratch = np.empty((2, theta.size), np.float32)

    def pull(self) -> Params:
        """The current parameters."""
        return Params(self.version, self.theta.copy())

    def push(self, version: int, grad: np.ndarray) -> Params:
        """Apply the optimizer to ``grad`` (computed at ``version``, the current one) and
        return the next parameters."""
        assert version == self.version, "one process trains on the parameters it was given"
        if apply_update(self.theta, grad, self.opt_state, self.optimizer, step=self.version,
                        scratch=self._scratch):
            self.nonfinite_streak = 0
        else:
            self.nonfinite_streak += 1
            self.nonfinite_skipped += 1
        self.version += 1
        return Params(self.version, self.theta.copy(), self.nonfinite_streak)


def train_single(cfg: Config, laps: WorkerLaps | None = None, job: str | None = None) -> dict:
    """The single-node BA3C trainer: simulators, predictor, trainer and optimizer in one
    process. Returns the run summary. ``laps``: where the worker's threads time their
    sections (``dba3c bench --profile`` reads them while it runs); ``job``: the Slurm job
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

    print("\n".join(rank_lines(0, "chief+worker", cfg.env, cfg.train, ranks_on_node=1)),
          file=sys.stderr, flush=True)
    store = LocalParameterServer(start.theta, start.opt_state, start.step, make_optimizer(cfg))
    with Chief(cfg, start.ckpt, spec.layout(), num_workers=1,
               hosts=[socket.gethostname()]) as chief, chief.evaluator_thread(spec) as evaluator:
        chief.install_signal_handlers()
        pool = None if cfg.debug.synthetic_data else make_env_pool(cfg.env, cfg.model)
        worker = Worker(cfg, 0, Learner(spec, cfg.train, start.theta), pool, laps)

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
                for step, scores in evaluator.after_step(params.version, params.theta):
                    chief.on_eval(step, scores)
            return chief.stop_reason is not None

        worker.train(store, after_step)
        if store.version > chief.start_step:
            save(store.version)
        chief.finish_evaluations(evaluator, Params(store.version, store.theta))
    return chief.summary
