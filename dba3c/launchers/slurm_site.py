"""How ``dba3c submit`` and ``dba3c sweep --launcher slurm`` ask Slurm for a run's ranks.

By default every rank gets a node of its own and all of that node's CPUs: ``--tasks-per-node
1``, ``--cpus-per-task`` = the partition's CPUs per node (``sinfo``) over the tasks per node,
for the job and again for ``srun`` (so that neither ``--exact`` nor a shared node binds a
rank to one core). A site's own options travel with every job: ``--partition``,
``--account``, ``--qos``, ``--constraint`` and any other sbatch option as ``--slurm
KEY=VALUE`` (submitit's ``slurm_additional_parameters``). A job's time limit is the
preset's ``train.max_seconds`` plus :data:`MARGIN_MIN` (:data:`UNTIMED_MIN` for a preset
without one) unless ``--time`` is given.
"""

from __future__ import annotations

import argparse
import math
import re
import subprocess
from dataclasses import dataclass

from dba3c.errors import UserError

MARGIN_MIN = 10  # start-up, the last evaluation and checkpoint after train.max_seconds
UNTIMED_MIN = 60  # the time limit of a run without train.max_seconds, unless --time says


@dataclass(frozen=True)
class SlurmSite:
    """The site's options of every job: partition, account, QOS, node features, and any other
    sbatch option (``additional``: (key, value) pairs, ``mem=0`` -> ``--mem=0``)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    additional: tuple[tuple[str, str], ...] = ()


def add_slurm_args(p: argparse.ArgumentParser, *, time_help: str) -> None:
    """The options of a Slurm launch: layout, CPUs, time, and the site's own."""
    p.add_argument("--tasks-per-node", type=int, default=1,
                   help="MPI ranks per node (default 1: every rank has a node)")
    p.add_argument("--cpus-per-task", type=int, default=None,
                   help="CPUs per rank (default: all of a node's, shared by its ranks; from "
                   "sinfo)")
    p.add_argument("--time", type=int, default=None, help=time_help)
    p.add_argument("--partition", default=None, help="Slurm partition")
    p.add_argument("--account", default=None, help="Slurm account to charge")
    p.add_argument("--qos", default=None, help="Slurm quality of service")
    p.add_argument("--constraint", default=None, help="node features, e.g. 'skylake'")
    p.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                   help="any other sbatch option, e.g. --slurm mem=0 --slurm reservation=r1")


def site_from_args(args: argparse.Namespace) -> SlurmSite:
    """The :class:`SlurmSite` of parsed :func:`add_slurm_args` options."""
    additional = []
    for item in args.slurm:
        key, sep, value = item.partition("=")
        if not sep or not key or key.startswith("-"):
            raise UserError(f"--slurm {item!r} must look like KEY=VALUE (an sbatch option "
                            f"without its dashes, e.g. mem=0)")
        additional.append((key.replace("-", "_"), value))
    for name in ("tasks_per_node", "cpus_per_task", "time"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} {value} must be at least 1")
    return SlurmSite(args.partition, args.account, args.qos, args.constraint,
                     tuple(additional))


def smallest_node_cpus(sinfo_lines: str) -> int | None:
    """The fewest CPUs of a node in ``sinfo -h -N -o %c``'s output (None: no node)."""
    counts = [int(line.strip().rstrip("+")) for line in sinfo_lines.splitlines()
              if line.strip().rstrip("+").isdigit()]
    return min(counts) if counts else None


def partition_cpus(partition: str | None) -> int | None:
    """The fewest CPUs of a node in ``partition`` (the default one when None), from sinfo;
    None when sinfo cannot say."""
    cmd = ["sinfo", "-h", "-N", "-o", "%c"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return smallest_node_cpus(out.stdout)


def nodes_for(world: int, tasks_per_node: int) -> int:
    """Nodes for ``world`` ranks at ``tasks_per_node`` each (they must fill every node:
    the tasks of a job are nodes x tasks per node)."""
    if world % tasks_per_node:
        raise UserError(f"{world} ranks do not fill nodes of {tasks_per_node} tasks "
                        f"(--tasks-per-node must divide the world size)")
    return world // tasks_per_node


def time_limit_minutes(max_seconds: float, given: int | None) -> int:
    """``given`` (``--time``), else ``train.max_seconds`` plus :data:`MARGIN_MIN`, else (a
    run with no time limit of its own) :data:`UNTIMED_MIN`."""
    if given is not None:
        return given
    return math.ceil(max_seconds / 60) + MARGIN_MIN if max_seconds else UNTIMED_MIN


def short_time_limit(minutes: int | None, max_seconds: float) -> str | None:
    """A warning when a job's time limit of ``minutes`` leaves less than :data:`MARGIN_MIN`
    after ``train.max_seconds`` for start-up, the final evaluation and checkpoint: a run
    still short of its target would be stopped by the signal before the limit and requeued
    (another whole allocation) instead of ending. None when it fits or nothing is known."""
    if minutes is None or not max_seconds:
        return None
    needed = time_limit_minutes(max_seconds, None)
    if minutes >= needed:
        return None
    return (f"the job's time limit of {minutes} min leaves less than {MARGIN_MIN} min after "
            f"train.max_seconds={max_seconds:g} for start-up and the final evaluation: a run "
            f"that misses its target is stopped and requeued; ask for --time={needed} (or "
            f"more) or lower train.max_seconds")


def executor_parameters(*, nodes: int, tasks_per_node: int, minutes: int,
                        cpus_per_task: int | None, site: SlurmSite, mpi_plugin: str,
                        signal_delay: int) -> dict:
    """submitit's parameters of a Slurm job whose tasks form one MPI world."""
    srun = [f"--mpi={mpi_plugin}", "--kill-on-bad-exit=1"]
    params: dict = dict(nodes=nodes, tasks_per_node=tasks_per_node, timeout_min=minutes,
                        name="dba3c", slurm_signal_delay_s=signal_delay)
    if cpus_per_task:
        params["cpus_per_task"] = cpus_per_task
        srun.append(f"--cpus-per-task={cpus_per_task}")
    params["slurm_srun_args"] = srun
    for name in ("partition", "account", "qos", "constraint"):
        if getattr(site, name):
            params[f"slurm_{name}"] = getattr(site, name)
    params["slurm_additional_parameters"] = {"requeue": True, **dict(site.additional)}
    return params


def slurm_minutes(limit: str) -> int | None:
    """Slurm's time-limit text (``squeue -o %l``: ``MM:SS``, ``H:MM:SS``, ``D-HH:MM:SS``,
    ``UNLIMITED``) in whole minutes, rounded up; None when unlimited or unreadable."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", limit.strip())
    if match is None:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return math.ceil(((days * 24 + hours) * 60 + minutes) + seconds / 60)


def allocation_lines(world: int, tasks_per_node: int, minutes: int | None,
                     target: float | None) -> list[str]:
    """What a job of ``world`` ranks, ``tasks_per_node`` per node, asks for and the
    node-hours its time limit can spend (``minutes`` None: no limit known); ``target``: the
    score at which the run ends early (``eval.stop_at_target``), if it does."""
    nodes = -(-world // tasks_per_node)
    lines = [f"allocation: {nodes} node(s) x {tasks_per_node} task(s) = {world} tasks "
             f"(ranks), every CPU of a node shared by its tasks"]
    if minutes is None:
        lines.append("time limit: none known, so no bound on the node-hours")
    else:
        lines.append(f"time limit: {minutes} min -> at most {nodes * minutes / 60:.1f} "
                     f"node-hours")
    if target is not None:
        lines.append(f"the run ends earlier once a greedy evaluation reaches {target:g} "
                     f"(eval.stop_at_target)")
    return lines
