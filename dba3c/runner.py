"""Training entry points: one process, or this process's role in a distributed world.

Everything that can be refused (config, checkpoint, model shape) is checked before the run
directory is touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dba3c import checkpoint
from dba3c.adam import AdamState
from dba3c.chief import Chief
from dba3c.config import Config
from dba3c.core import LocalParameterServer, Params
from dba3c.envs import EnvPool, make_env_pool, make_spec
from dba3c.errors import UserError
from dba3c.models import NetSpec, make_net_spec
from dba3c.rundir import RunDir


@dataclass
class StartState:
    """Where training starts: a fresh initialisation or a checkpoint."""

    step: int
    theta: np.ndarray
    adam: AdamState
    ckpt: checkpoint.Checkpoint | None


def make_pool_and_spec(cfg: Config) -> tuple[EnvPool, NetSpec]:
    """The training simulators and the network for their spaces."""
    pool = make_env_pool(cfg.env, cfg.model)
    return pool, make_net_spec(cfg.model, pool.obs_shape, pool.num_actions)


def load_start(cfg: Config, spec: NetSpec) -> StartState:
    """Resume from the run directory's newest valid checkpoint, or initialise (seeded)."""
    ckpt = checkpoint.load_latest(RunDir(cfg.run.dir).checkpoints_dir)
    layout = spec.layout()
    if ckpt is None:
        return StartState(0, spec.init_params(cfg.run.seed), AdamState.zeros(layout.num_params),
                          None)
    checkpoint.check_layout(ckpt, cfg, spec.layout(), f"in {cfg.run.dir}",
                 "use the run's own config or a new run.dir")
    return StartState(ckpt.step, ckpt.theta.copy(),
                      AdamState(ckpt.adam_m.copy(), ckpt.adam_v.copy(), ckpt.adam_count), ckpt)


def train_single(cfg: Config) -> dict:
    """The single-node BA3C trainer: simulators, predictor, trainer and Adam in one process.
    Returns the run summary."""
    if cfg.synthetic.enabled:
        raise UserError("synthetic.enabled=true needs parameter-server ranks: run it with "
                        "`dba3c launch CONFIG --workers W` (world size 1 computes for real)")
    # TensorFlow is imported here, not with this module: the chief of a synthetic-compute run
    # uses load_start and imports none
    from dba3c.evaluation import BackgroundEvaluator
    from dba3c.learner import Learner
    from dba3c.worker import Worker

    pool, spec = (None, make_spec(cfg)) if cfg.debug.synthetic_data else make_pool_and_spec(cfg)
    try:
        start = load_start(cfg, spec)
    except UserError:
        if pool is not None:
            pool.close()
        raise
    store = LocalParameterServer(start.theta, start.adam, start.step, cfg.adam, cfg.train.lr)
    chief = Chief(cfg, start.ckpt, spec.layout(), num_workers=1)
    chief.install_signal_handlers()
    evaluator = None
    if cfg.eval.every:
        evaluator = BackgroundEvaluator(cfg, spec)
        evaluator.start()
    worker = Worker(cfg, 0, Learner(spec, cfg.train, start.theta), pool)

    def save(step: int) -> None:
        shard = store.shard
        chief.save_checkpoint(step, shard.theta_shard, shard.adam.m_shard, shard.adam.v_shard,
                              shard.adam.count)

    def after_step(params: Params, report: dict) -> bool:
        chief.worker_report(0, report)
        chief.extra["train/nonfinite_skipped"] = store.shard.stats.nonfinite_skipped
        chief.on_step(params.version)
        if chief.checkpoint_due(params.version):
            save(params.version)
        if evaluator is not None:
            if params.version % cfg.eval.every == 0:
                evaluator.submit(params.version, params.theta)
            for step, scores in evaluator.results():
                chief.on_eval(step, scores)
        return chief.stop_reason is not None

    try:
        worker.train(store, after_step)
        if store.shard.version > chief.start_step:
            save(store.shard.version)
    finally:
        if evaluator is not None:
            evaluator.stop()
        chief.close()
    return chief.summary
