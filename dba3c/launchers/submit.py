"""Submitit launcher: ``python -m dba3c.launchers.submit`` (also ``dba3c submit``).

One Slurm job whose tasks form the MPI world, or a job array for sweeps (``--grid
KEY=v1,v2`` once per swept key; one run directory per combination). Every rank gets a node
and all its CPUs unless told otherwise, srun's PMI plugin fits the site's MPI, and the time
limit follows ``train.max_seconds`` (:mod:`dba3c.launchers.slurm_site`).
``--cluster local|debug`` runs the same function without Slurm (one process, world size 1).

    dba3c submit configs/breakout_64.yaml --nodes 69 --partition cpu --account proj42
    dba3c submit configs/cartpole.yaml --tasks-per-node 3 --ps 1 --grid run.seed=0,1,2

Preemption and time limits: Slurm signals USR2 ``--signal-delay`` seconds before the limit
(or ``scancel --signal=USR2 JOBID``); rank 0 writes a checkpoint, every rank stops cleanly, and
the job requeues itself; the requeued job resumes from the run directory.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import subprocess
import sys
import time

import submitit

from dba3c.config import overrides_files
from dba3c.distributed.roles import make_roles
from dba3c.errors import OneLineParser, UserError, exit_code
from dba3c.launchers.slurm_site import (
    MARGIN_MIN,
    SlurmSite,
    add_slurm_args,
    executor_parameters,
    partition_cpus,
    site_from_args,
    time_limit_minutes,
)
from dba3c.launchers.srun_options import mpi_plugin
from dba3c.learning.tflog import quiet_tensorflow
from dba3c.outputs import check_output_dir
from dba3c.preset import load_config
from dba3c.training.rundir import RunDir


class TrainJob(submitit.helpers.Checkpointable):
    """``dba3c train CONFIG OVERRIDES`` in every task of a submitit job.

    Returns the run summary on rank 0 (None on other ranks). When the run stopped because of a
    signal, rank 0 requeues the Slurm job, which then resumes from the run directory.
    """

    def __init__(self, config: str, overrides: list[str]):
        self.config, self.overrides = config, list(overrides)

    def __call__(self) -> dict | None:
        from dba3c.distributed.run import train
        from dba3c.launchers.mpienv import slurm_job_id, world_size_hint

        quiet_tensorflow(os.environ)
        rc = train(self.config, self.overrides, world_size_hint(), slurm_job_id())
        if rc != 0:
            raise RuntimeError(f"dba3c train exited with code {rc} (see the job log)")
        env = submitit.JobEnvironment()
        if env.global_rank != 0:
            return None
        summary = RunDir(load_config(self.config, self.overrides).run.dir).read_summary()
        if str(summary.get("stop_reason") or "").startswith("signal") and \
                env.cluster == "slurm":
            print(f"dba3c: stopped by {summary['stop_reason']}; requeueing job {env.job_id}",
                  flush=True)
            subprocess.run(["scontrol", "requeue", env.job_id.split("_")[0]], check=True)
            time.sleep(3600)  # Slurm ends this process as it requeues the job
        return summary


def grid_overrides(grid: list[str]) -> list[list[str]]:
    """``["a.b=1,2", "c.d=x,y"]`` -> one override list per combination; a key given twice is
    a UserError (its values go in one ``--grid``)."""
    axes, keys = [], set()
    for item in grid:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise UserError(f"--grid {item!r} must look like section.key=v1,v2")
        if key in keys:
            raise UserError(f"--grid {key} is given twice; give each key once, with all its "
                            f"values (--grid {key}=v1,v2,...)")
        keys.add(key)
        axes.append([f"{key}={v}" for v in values.split(",")])
    return [list(combo) for combo in itertools.product(*axes)] if axes else [[]]


def point_name(index: int, combo: list[str]) -> str:
    """``003-dist.ps_2-model.hidden_64``: a sortable, readable directory name per grid point."""
    return f"{index:03d}-" + "-".join(c.replace("=", "_").replace("/", "_") for c in combo)


def sbatch_message(stderr: str) -> str:
    """The line of sbatch's output that says why it refused a job: the last one naming an
    error, else the last one."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["(no message)"])[-1]


def submit_all(executor: submitit.AutoExecutor, calls: list[TrainJob]) -> list:
    """Submit ``calls`` as one batch (a job array when several); the submitit jobs. sbatch
    refusing them (a wrong account, partition, QOS or time limit) is a UserError quoting
    sbatch's own message."""
    errors = io.StringIO()
    slurm = executor.cluster == "slurm"
    try:  # submitit prints sbatch's refusal itself too: kept for the one line below
        with contextlib.redirect_stderr(errors) if slurm else contextlib.nullcontext():
            with executor.batch():
                jobs = [executor.submit(call) for call in calls]
    except submitit.core.utils.FailedJobError as e:
        raise UserError(f"sbatch refused the job: {sbatch_message(str(e) or errors.getvalue())}"
                        f" (check --account, --partition, --qos, --time and --slurm)") from None
    except FileNotFoundError as e:
        if e.filename != "sbatch":
            raise
        raise UserError("sbatch is not on PATH: run where Slurm's client commands are, or use "
                        "--cluster local") from None
    print(errors.getvalue(), end="", file=sys.stderr)  # whatever a submission that went says
    return jobs


def make_executor(*, folder: str, cluster: str | None, nodes: int, tasks_per_node: int,
                  minutes: int, signal_delay: int = 120, max_requeues: int = 3,
                  site: SlurmSite | None = None,
                  cpus_per_task: int | None = None) -> submitit.AutoExecutor:
    """A submitit executor whose Slurm jobs form one MPI world, give each rank
    ``cpus_per_task`` CPUs (default: its node's, over the tasks per node), carry the site's
    options, are signalled ``signal_delay`` seconds before their time limit and may requeue
    ``max_requeues`` times. Says on stderr what it chose."""
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster,
                                     slurm_max_num_timeout=max_requeues)
    if executor.cluster != "slurm":
        executor.update_parameters(nodes=nodes, tasks_per_node=tasks_per_node,
                                   timeout_min=minutes, name="dba3c")
        return executor
    site = site or SlurmSite()
    plugin, because = mpi_plugin(os.environ)
    if cpus_per_task is None:
        node_cpus = partition_cpus(site.partition)
        cpus_per_task = max(1, node_cpus // tasks_per_node) if node_cpus else None
        cpus_from = (f"the partition's nodes have {node_cpus} CPUs, {tasks_per_node} task(s) "
                     f"each" if node_cpus else "sinfo did not say: Slurm's default")
    else:
        cpus_from = "--cpus-per-task"
    print(f"dba3c submit: {nodes} node(s) x {tasks_per_node} task(s), {minutes} min; "
          f"--cpus-per-task={cpus_per_task or 'default'} ({cpus_from}); {because}",
          file=sys.stderr, flush=True)
    executor.update_parameters(**executor_parameters(
        nodes=nodes, tasks_per_node=tasks_per_node, minutes=minutes,
        cpus_per_task=cpus_per_task, site=site, mpi_plugin=plugin, signal_delay=signal_delay))
    return executor


def make_parser() -> argparse.ArgumentParser:
    """Arguments of the submitit launcher."""
    p = OneLineParser(prog="dba3c submit", description=__doc__.split("\n")[0])
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    p.add_argument("--overrides", action="append", default=[], dest="overrides_files",
                   metavar="FILE", help="a YAML file of config sections applied first")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--ps", type=int, default=None, help="parameter servers (dist.ps)")
    add_slurm_args(p, time_help="minutes (default: train.max_seconds plus "
                   f"{MARGIN_MIN} minutes)")
    p.add_argument("--cluster", choices=["slurm", "local", "debug"], default=None,
                   help="default: slurm when sbatch is available, else local")
    p.add_argument("--folder", default="runs/submitit/%j", help="submitit logs")
    p.add_argument("--grid", action="append", default=[], help="KEY=v1,v2 (job array)")
    p.add_argument("--signal-delay", type=int, default=120, help="seconds of warning")
    p.add_argument("--max-requeues", type=int, default=3)
    p.add_argument("--wait", action="store_true", help="wait and print the results")
    return p


def submit(args: argparse.Namespace) -> list:
    """Validate every combination's layout, then submit; returns the submitit jobs."""
    base = [*overrides_files(args.overrides_files), *args.overrides,
            *([f"dist.ps={args.ps}"] if args.ps is not None else [])]
    site = site_from_args(args)
    world = args.nodes * args.tasks_per_node
    combos = grid_overrides(args.grid)
    jobs_args, minutes = [], 0
    for i, combo in enumerate(combos):
        overrides = base + combo
        cfg = load_config(args.config, overrides)
        run_dir = cfg.run.dir
        if len(combos) > 1:
            run_dir = f"{cfg.run.dir}/{point_name(i, combo)}"
            overrides.append(f"run.dir={run_dir}")
        make_roles(world, cfg)  # refuse impossible layouts before submitting anything
        check_output_dir(run_dir, f"run.dir={run_dir}")  # not in the job, hours later
        minutes = max(minutes, time_limit_minutes(cfg.train.max_seconds, args.time))
        jobs_args.append(TrainJob(args.config, overrides))
    executor = make_executor(folder=args.folder, cluster=args.cluster, nodes=args.nodes,
                             tasks_per_node=args.tasks_per_node, minutes=minutes,
                             signal_delay=args.signal_delay, max_requeues=args.max_requeues,
                             site=site, cpus_per_task=args.cpus_per_task)
    if executor.cluster != "slurm" and world > 1:
        raise UserError(f"--cluster {executor.cluster} runs one process; use --nodes 1 "
                        f"--tasks-per-node 1 (asked for {world} tasks)")
    return submit_all(executor, jobs_args)


def main(argv: list[str] | None = None) -> int:
    """Submit; with ``--wait`` print each job's rank-0 summary. Bad input (an argument, the
    config, sbatch's refusal): one ``error:`` line, exit code 2."""
    return exit_code(lambda: _submit_and_report(argv))


def _submit_and_report(argv: list[str] | None) -> int:
    args = make_parser().parse_intermixed_args(argv)
    jobs = submit(args)
    for job in jobs:
        print(f"submitted job {job.job_id} (logs in {job.paths.folder})", flush=True)
    if args.wait:
        for job in jobs:
            results = job.results()
            print(json.dumps(results[0], indent=1), flush=True)
    return 0


if __name__ == "__main__":
    quiet_tensorflow(os.environ)
    sys.exit(main())
