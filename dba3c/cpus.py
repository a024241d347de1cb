"""The CPUs a rank may run on, and the thread pools sized from them.

A scheduler may bind a rank to fewer CPUs than its node has (Slurm's ``task/affinity`` with
``--exact`` or on a shared node, cgroups, ``taskset``): ``os.cpu_count()`` counts the node's
CPUs, ``os.sched_getaffinity(0)`` the ones this process may use. Every pool is sized from
the latter unless the config sets it:

- simulator threads (``env.num_threads``): one per simulator, at most one per bound CPU;
- TensorFlow's intra-op and inter-op pools (``train.intra_op_threads``,
  ``train.inter_op_threads``): one thread per bound CPU each.

A rank that may use fewer CPUs than its share of the node (the node's CPUs over the ranks on
it) says so once, naming the fix: its threads would share a few cores while the others idle.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from dba3c.config import EnvConfig, TrainConfig


def bound_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (all of the machine's where affinity is unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def cpu_ranges(cpus: Sequence[int]) -> str:
    """CPU numbers as Linux writes a CPU list: ``(0, 1, 2, 5)`` -> ``0-2,5``."""
    parts: list[str] = []
    for cpu in sorted(cpus):
        if parts and cpu == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{cpu}"
        else:
            parts.append(str(cpu))
    return ",".join(parts)


@dataclass(frozen=True)
class Threads:
    """The thread pools of one rank."""

    simulators: int
    intra_op: int
    inter_op: int


def simulator_threads(num_threads: int, num_envs: int, num_cpus: int) -> int:
    """``num_threads`` (``env.num_threads``), or when 0 one per simulator and at most one per
    bound CPU."""
    return num_threads or max(1, min(num_envs, num_cpus))


def tensorflow_threads(train: TrainConfig, num_cpus: int) -> tuple[int, int]:
    """(intra-op, inter-op): the config's, or one per bound CPU each."""
    return train.intra_op_threads or num_cpus, train.inter_op_threads or num_cpus


def threads_for(env: EnvConfig, train: TrainConfig, num_cpus: int) -> Threads:
    """Every pool of a rank bound to ``num_cpus`` CPUs."""
    return Threads(simulator_threads(env.num_threads, env.num_envs, num_cpus),
                   *tensorflow_threads(train, num_cpus))


def binding_warning(num_bound: int, node_cpus: int, ranks_on_node: int) -> str | None:
    """The warning for a rank bound to fewer CPUs than its share of the node
    (``node_cpus // ranks_on_node``, at least 1); None when it has its share."""
    share = max(1, node_cpus // max(1, ranks_on_node))
    if num_bound >= share:
        return None
    return (f"bound to {num_bound} of the node's {node_cpus} CPUs ({ranks_on_node} rank(s) on "
            f"it): its threads share them while the others idle. Ask the scheduler for "
            f"{share}: sbatch and srun --cpus-per-task={share} (one rank per node: all its "
            f"CPUs), or size the pools yourself (env.num_threads, train.intra_op_threads, "
            f"train.inter_op_threads)")


def rank_line(host: str, rank: int, role: str, cpus: Sequence[int], node_cpus: int,
              threads: Threads | None) -> str:
    """A rank's first log line: where it runs, on which CPUs, with which pools (None: a rank
    that runs no simulators and no TensorFlow)."""
    pools = ("no simulators, no TensorFlow" if threads is None else
             f"threads: {threads.simulators} simulator, {threads.intra_op} intra-op, "
             f"{threads.inter_op} inter-op")
    return (f"rank {rank} ({role}) on {host}: {len(cpus)} of {node_cpus} CPUs bound "
            f"({cpu_ranges(cpus)}); {pools}")


def rank_lines(rank: int, role: str, env: EnvConfig | None, train: TrainConfig | None,
               ranks_on_node: int) -> list[str]:
    """What a rank prints first: :func:`rank_line` for this process, and
    :func:`binding_warning`'s line when it has one (``env``/``train`` None: no pools)."""
    import socket

    cpus, node_cpus = bound_cpus(), os.cpu_count() or 1
    threads = None if env is None or train is None else threads_for(env, train, len(cpus))
    lines = [rank_line(socket.gethostname(), rank, role, cpus, node_cpus, threads)]
    warning = binding_warning(len(cpus), node_cpus, ranks_on_node)
    return lines + ([f"warning: rank {rank} ({role}) {warning}"] if warning else [])
