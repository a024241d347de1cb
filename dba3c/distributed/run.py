"""``dba3c train``: one process (:func:`dba3c.distributed.single.train_single`), or one rank of a
distributed run playing the role :mod:`dba3c.distributed.roles` gives it."""

from __future__ import annotations

import sys
import traceback
from contextlib import nullcontext
from dataclasses import replace

from dba3c.config import Config, EnvConfig, TrainConfig, is_atari
from dba3c.core import Transport
from dba3c.cpus import rank_lines, this_cpu_precision
from dba3c.distributed.collective.ranks import run_collective_rank
from dba3c.distributed.evaluator import run_evaluator
from dba3c.distributed.ps.ranks import run_chief, run_worker
from dba3c.distributed.ps.server import run_ps
from dba3c.distributed.roles import Roles, make_roles, staged_steps
from dba3c.errors import TrainingError, UserError, exit_code
from dba3c.learning.models import NetSpec
from dba3c.preset import load_config, validate
from dba3c.training.lock import RunLock
from dba3c.training.metrics import next_steps, run_report
from dba3c.training.rundir import RunDir
from dba3c.training.worker import Worker


def make_worker(cfg: Config, rank: int, spec: NetSpec, roles: Roles) -> Worker:
    """This rank's trainer loop: simulators and a TensorFlow learner, or with
    ``synthetic.enabled`` a :class:`~dba3c.distributed.synthetic.SyntheticWorker` (no
    TensorFlow)."""
    if cfg.synthetic.enabled:
        from dba3c.distributed.synthetic import SyntheticWorker

        return SyntheticWorker(cfg, rank, spec, roles.workers)
    from dba3c.games.envs import make_env_pool
    from dba3c.learning.learner import Learner

    pool = None if cfg.debug.synthetic_data else make_env_pool(cfg.env, cfg.model)
    learner = Learner(spec, cfg.train, spec.init_params(0), staged=staged_steps(cfg),
                      precision=this_cpu_precision(cfg.model.precision).dtype)
    return Worker(cfg, rank, learner, pool)


def run_rank(t: Transport, cfg: Config, spec: NetSpec, job: str | None = None) -> None:
    """Play this rank's role to the end of the run. Rank 0, the chief, holds the run
    directory's lock meanwhile (``job``: the Slurm job it runs in, recorded with it)."""
    with RunLock(cfg.run.dir, job) if t.rank == 0 else nullcontext():
        _role_loop(t, cfg, spec)


def _role_loop(t: Transport, cfg: Config, spec: NetSpec) -> None:
    """The loop of this rank's role."""
    roles = make_roles(t.size, cfg)
    role = roles.role(t.rank)
    if cfg.dist.aggregation == "collective" and run_collective_rank(
            t, roles, cfg, spec, lambda: make_worker(cfg, t.rank, spec, roles)):
        return  # a worker's part (the evaluator rank plays its usual role below)
    if t.rank == 0:
        run_chief(t, roles, cfg, spec, lambda: make_worker(cfg, t.rank, spec, roles))
    elif role == "ps":
        run_ps(t, roles, cfg, spec.layout().num_params)
    elif role == "evaluator":
        run_evaluator(t, roles, cfg, spec)
    else:
        run_worker(t, roles, cfg, spec, make_worker(cfg, t.rank, spec, roles))


def rank_spec(t: Transport, cfg: Config) -> NetSpec:
    """The network of a run on world ``t``, once the config is checked again with the number
    of workers the world size gives (UserError: the same problem on every rank)."""
    from dba3c.games.envs import env_spaces  # cached per process: a sequence of runs opens one
    from dba3c.learning.models import make_net_spec

    roles = make_roles(t.size, cfg)
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    validate(replace(cfg, dist=replace(cfg.dist, workers=roles.num_workers)))
    return spec


def ignore_polite_signals() -> None:
    """On ranks other than 0: the chief coordinates stopping, the others ignore SIGUSR2,
    SIGINT and SIGTERM (mpiexec forwards SIGTERM and SIGINT to every rank, Slurm sends
    SIGTERM to all tasks)."""
    import signal

    for sig in (signal.SIGUSR2, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def play_rank(t: Transport, cfg: Config, spec: NetSpec, job: str | None = None) -> None:
    """:func:`run_rank`; a failure ends the whole world through ``t.abort`` (2 for a
    UserError, 1 otherwise) after an ``error:`` line naming the rank."""
    try:
        run_rank(t, cfg, spec, job)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        t.abort(2)
    except TrainingError as e:
        print(f"error: rank {t.rank}: {e}", file=sys.stderr, flush=True)
        t.abort(1)
    except BaseException as e:  # noqa: BLE001 - any failure must end the whole job
        role = make_roles(t.size, cfg).role(t.rank)
        print(f"error: rank {t.rank} ({role}) failed: {e!r}\n{traceback.format_exc()}",
              file=sys.stderr, flush=True)
        t.abort(1)


def role_pools(role: str, cfg: Config) -> tuple[EnvConfig | None, TrainConfig | None]:
    """The simulators and TensorFlow a rank of ``role`` runs, for its first line: a worker
    its ``env.num_envs`` simulators; the evaluator (or a chief that does not train, which
    may evaluate in a thread) ``eval.num_envs`` of them; all of these TensorFlow. A
    parameter server, and every rank of a synthetic run, run neither (None, None)."""
    if role == "ps" or cfg.synthetic.enabled:
        return None, None
    if "worker" in role:
        return cfg.env, cfg.train
    return replace(cfg.env, num_envs=cfg.eval.num_envs), cfg.train


def train_distributed(cfg: Config, job: str | None) -> int:
    """``dba3c train`` under mpiexec/srun: any failing rank ends the whole job non-zero.
    ``job``: the Slurm job it runs in."""
    from dba3c.distributed.transport.mpi import MpiTransport

    t = MpiTransport(cfg.dist.collective_algorithm)
    try:
        spec = rank_spec(t, cfg)
    except UserError as e:  # every rank finds the same problem; one reports it
        if t.rank == 0:
            print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    role = make_roles(t.size, cfg).role(t.rank)
    env, train_cfg = role_pools(role, cfg)
    hosts = t.gather_hosts()
    precision = cfg.model.precision if train_cfg is not None and "worker" in role else None
    for line in rank_lines(t.rank, role, env, train_cfg, hosts.count(hosts[t.rank]), precision):
        print(line, file=sys.stderr, flush=True)  # a line a write (rank_output.whole_lines)
    if t.rank != 0:
        ignore_polite_signals()
    play_rank(t, cfg, spec, job)
    t.barrier()
    if t.rank == 0:
        print(f"run finished; outputs in {cfg.run.dir}", file=sys.stderr)
        print_run_end(cfg)
    return 0


def print_run_end(cfg: Config) -> None:
    """The lines that end a finished run on stderr: what the agent did, then the commands
    that use the run's outputs."""
    lines = run_report(RunDir(cfg.run.dir))
    for line in [*lines, next_steps(cfg.run.dir, is_atari(cfg.env.id))]:
        print(line, file=sys.stderr)


def train(config_path: str, overrides: list[str], world_size: int,
          job: str | None = None) -> int:
    """``dba3c train CONFIG OVERRIDES``: alone when ``world_size`` is 1, else as this rank of
    an MPI world of that size; ``job``: the Slurm job this process runs in (the launcher
    reads both from its environment). Returns the exit code: 0 done, 2 bad input, 1 training
    failed (with one ``error: ...`` line on stderr)."""
    def run() -> int:
        cfg = load_config(config_path, overrides)
        if world_size > 1:
            return train_distributed(cfg, job)
        from dba3c.distributed.single import train_single

        summary = train_single(cfg, job=job)
        print(f"run finished at step {summary.get('final_step')} "
              f"({summary.get('stop_reason')}); outputs in {cfg.run.dir}", file=sys.stderr)
        print_run_end(cfg)
        return 0

    return exit_code(run)
