"""Submitit launcher: ``python -m dba3c.launchers.submit`` (also ``dba3c submit``).

One Slurm job whose tasks form the MPI world (srun with PMI2), or a job array for sweeps
(``--grid KEY=v1,v2`` once per swept key; one run directory per combination).
``--cluster local|debug`` runs the same function without Slurm (one process, world size 1).

    dba3c submit configs/breakout_64.yaml --nodes 69 --tasks-per-node 1 --time 120
    dba3c submit configs/cartpole.yaml --tasks-per-node 3 --ps 1 --grid run.seed=0,1,2

Preemption and time limits: Slurm signals USR2 ``--signal-delay`` seconds before the limit
(or ``scancel --signal=USR2 JOBID``); rank 0 writes a checkpoint, every rank stops cleanly, and
the job requeues itself; the requeued job resumes from the run directory.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time

import submitit

from dba3c.distributed.roles import make_roles
from dba3c.errors import UserError
from dba3c.learning.tflog import quiet_tensorflow
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
        from dba3c.launchers.mpienv import world_size_hint

        quiet_tensorflow(os.environ)
        rc = train(self.config, self.overrides, world_size_hint())
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
    """``["a.b=1,2", "c.d=x,y"]`` -> one override list per combination."""
    axes = []
    for item in grid:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise UserError(f"--grid {item!r} must look like section.key=v1,v2")
        axes.append([f"{key}={v}" for v in values.split(",")])
    return [list(combo) for combo in itertools.product(*axes)] if axes else [[]]


def point_name(index: int, combo: list[str]) -> str:
    """``003-dist.ps_2-model.hidden_64``: a sortable, readable directory name per grid point."""
    return f"{index:03d}-" + "-".join(c.replace("=", "_").replace("/", "_") for c in combo)


def make_executor(*, folder: str, cluster: str | None, nodes: int, tasks_per_node: int,
                  minutes: int, signal_delay: int = 120, max_requeues: int = 3,
                  partition: str | None = None,
                  cpus_per_task: int | None = None) -> submitit.AutoExecutor:
    """A submitit executor whose Slurm jobs form one MPI world (srun, PMI2), are signalled
    ``signal_delay`` seconds before their time limit and may requeue ``max_requeues`` times."""
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster,
                                     slurm_max_num_timeout=max_requeues)
    params = dict(nodes=nodes, tasks_per_node=tasks_per_node, timeout_min=minutes,
                  name="dba3c")
    if executor.cluster == "slurm":
        params.update(slurm_srun_args=["--mpi=pmi2", "--kill-on-bad-exit=1"],
                      slurm_signal_delay_s=signal_delay,
                      slurm_additional_parameters={"requeue": True})
        if partition:
            params["slurm_partition"] = partition
        if cpus_per_task:
            params["cpus_per_task"] = cpus_per_task
    executor.update_parameters(**params)
    return executor


def make_parser() -> argparse.ArgumentParser:
    """Arguments of the submitit launcher."""
    p = argparse.ArgumentParser(prog="dba3c submit", description=__doc__.split("\n")[0])
    p.add_argument("config")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--tasks-per-node", type=int, default=1, help="MPI ranks per node")
    p.add_argument("--ps", type=int, default=None, help="parameter servers (dist.ps)")
    p.add_argument("--cpus-per-task", type=int, default=None)
    p.add_argument("--time", type=int, default=60, help="minutes")
    p.add_argument("--partition", default=None)
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
    base = list(args.overrides) + ([f"dist.ps={args.ps}"] if args.ps is not None else [])
    world = args.nodes * args.tasks_per_node
    combos = grid_overrides(args.grid)
    jobs_args = []
    for i, combo in enumerate(combos):
        overrides = base + combo
        cfg = load_config(args.config, overrides)
        if len(combos) > 1:
            overrides.append(f"run.dir={cfg.run.dir}/{point_name(i, combo)}")
        make_roles(world, cfg)  # refuse impossible layouts before submitting anything
        jobs_args.append(TrainJob(args.config, overrides))
    executor = make_executor(folder=args.folder, cluster=args.cluster, nodes=args.nodes,
                             tasks_per_node=args.tasks_per_node, minutes=args.time,
                             signal_delay=args.signal_delay, max_requeues=args.max_requeues,
                             partition=args.partition, cpus_per_task=args.cpus_per_task)
    if executor.cluster != "slurm" and world > 1:
        raise UserError(f"--cluster {executor.cluster} runs one process; use --nodes 1 "
                        f"--tasks-per-node 1 (asked for {world} tasks)")
    with executor.batch():
        jobs = [executor.submit(job) for job in jobs_args]
    return jobs


def main(argv: list[str] | None = None) -> int:
    """Submit; with ``--wait`` print each job's rank-0 summary."""
    args = make_parser().parse_intermixed_args(argv)
    try:
        jobs = submit(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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
