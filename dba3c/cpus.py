"""The CPUs a rank may run on, and the thread pools sized from them.

A scheduler may bind a rank to fewer CPUs than its node has (Slurm's ``task/affinity`` with
``--exact`` or on a shared node, cgroups, ``taskset``): ``os.cpu_count()`` counts the node's
CPUs, ``os.sched_getaffinity(0)`` the ones this process may use. Every pool is sized from
the latter unless the config sets it:

- simulator threads (``env.num_threads``): one per simulator, at most one per bound CPU;
- TensorFlow's intra-op and inter-op pools (``train.intra_op_threads``,
  ``train.inter_op_threads``): one thread per bound CPU each.

The simulator threads can run ``env.nice`` levels below the rest of the rank
(:func:`niced_threads`; 0 by default): where they share cores with the trainer, the
trainer's step (the critical path of a synchronous update) goes first, and the simulators
take what it leaves.

A rank that may use fewer CPUs than its share of the node (the node's CPUs over the ranks on
it) says so once, naming the fix: its threads would share a few cores while the others idle.

The CPU's features come from ``/proc/cpuinfo`` (:func:`read_cpuinfo`, the one place that reads
it): whether it computes bfloat16 natively decides ``model.precision: auto``
(:func:`precision_for`), and a rank that trains says in its first line which precision it
computes in. A measurement records the machine it ran on (:func:`machine_description`: the
CPU model and its features, the logical cores, the memory).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

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
    simulator_nice: int = 0


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
                   *tensorflow_threads(train, num_cpus), simulator_nice=env.nice)


def _thread_ids() -> set[int] | None:
    """This process's threads (Linux: its tasks in ``/proc/self/task``); None elsewhere."""
    try:
        return {int(name) for name in os.listdir("/proc/self/task")}
    except OSError:
        return None


@contextmanager
def niced_threads(increment: int) -> Iterator[None]:
    """Threads that the block starts (a C++ simulator pool) run ``increment`` nice levels
    below the calling thread, at most at 19: under contention Linux gives them that much
    less of a core (nice 10: about a tenth of a nice-0 thread's share), and idle cores all
    the same. Raising one's own threads' niceness needs no privilege. A thread that another
    thread starts meanwhile is lowered too: use it where nothing else starts threads. Where
    threads cannot be listed (not Linux) or with ``increment`` 0, nothing changes."""
    before = _thread_ids() if increment else None
    yield
    if before is None:
        return
    level = min(19, os.getpriority(os.PRIO_PROCESS, 0) + increment)
    for tid in sorted((_thread_ids() or set()) - before):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, level)
        except ProcessLookupError:  # a thread that already ended
            continue


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


# /proc/cpuinfo flags of native bfloat16 arithmetic: AMX-BF16 tiles (Intel Xeon from Sapphire
# Rapids) and AVX512_BF16 (AMD from Zen 4, Intel from Cooper Lake). Without them TensorFlow
# still computes bfloat16, converting to float32 and back: slower than float32.
BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")


def read_cpuinfo() -> str:
    """The text of ``/proc/cpuinfo`` ("" where there is none)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def first_cpu(cpuinfo: str) -> dict[str, str]:
    """The fields of the first processor of a /proc/cpuinfo text (``model name``,
    ``flags``, ...)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor only
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor of a /proc/cpuinfo text."""
    return frozenset(first_cpu(cpuinfo).get("flags", "").split())


@dataclass(frozen=True)
class Precision:
    """``model.precision`` (``setting``: auto, float32 or bfloat16) on a CPU that has native
    bfloat16 or not."""

    setting: str
    native_bfloat16: bool

    @property
    def dtype(self) -> str:
        """What the network computes in: ``bfloat16`` when asked for, or when ``auto`` on a
        CPU with native bfloat16; else ``float32``."""
        if self.setting == "auto":
            return "bfloat16" if self.native_bfloat16 else "float32"
        return self.setting

    def describe(self) -> str:
        """The choice and why, for a rank's first line."""
        cpu = "native" if self.native_bfloat16 else "no native"
        how = "auto" if self.setting == "auto" else "model.precision"
        return f"{self.dtype} ({how}; the CPU has {cpu} bfloat16)"

    def warning(self) -> str | None:
        """The warning for bfloat16 asked for on a CPU without native bfloat16 (None
        otherwise)."""
        if self.setting != "bfloat16" or self.native_bfloat16:
            return None
        return (f"model.precision=bfloat16 on a CPU without native bfloat16 (none of "
                f"{', '.join(BFLOAT16_FLAGS)} in /proc/cpuinfo): TensorFlow emulates it, "
                f"slower than float32 (use model.precision=auto or float32)")


def has_native_bfloat16(flags: Iterable[str]) -> bool:
    """Whether a CPU with feature ``flags`` (/proc/cpuinfo's) computes bfloat16 natively."""
    return not set(BFLOAT16_FLAGS).isdisjoint(flags)


def precision_for(setting: str, flags: Iterable[str]) -> Precision:
    """``model.precision`` ``setting`` on a CPU with feature ``flags`` (/proc/cpuinfo's)."""
    return Precision(setting, has_native_bfloat16(flags))


def this_cpu_precision(setting: str) -> Precision:
    """``model.precision`` ``setting`` on this machine's CPU."""
    return precision_for(setting, cpu_flags(read_cpuinfo()))


def cpu_description(cpuinfo: str) -> str:
    """The first CPU of a /proc/cpuinfo text: model name, family and model numbers, clock,
    the widest vector instructions it lists (AVX-512, AVX2 or neither) and whether it has
    native bfloat16 (:data:`BFLOAT16_FLAGS`)."""
    fields = first_cpu(cpuinfo)
    flags = cpu_flags(cpuinfo)
    vector = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags
              else "no AVX2")
    if has_native_bfloat16(flags):
        vector += ", native bfloat16"
    mhz = fields.get("cpu MHz")
    clock = f", {float(mhz) / 1000:.1f} GHz" if mhz else ""
    return (f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')}"
            f", model {fields.get('model', '?')}{clock}, {vector})")


def machine_description() -> str:
    """CPU model, logical cores and memory of this machine."""
    cpuinfo = read_cpuinfo()
    model = cpu_description(cpuinfo) if cpuinfo else platform.processor() or "unknown CPU"
    try:
        mem_kb = next(int(line.split()[1]) for line in
                      Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:"))
        memory = f", {mem_kb / 2 ** 20:.0f} GiB"
    except (OSError, StopIteration):
        memory = ""
    return f"{model}, {os.cpu_count()} logical cores{memory}"


def rank_line(host: str, rank: int, role: str, cpus: Sequence[int], node_cpus: int,
              threads: Threads | None, precision: Precision | None = None) -> str:
    """A rank's first log line: where it runs, on which CPUs, with which pools (None: a rank
    that runs no simulators and no TensorFlow) and, for a rank that trains, in which
    precision."""
    if threads is None:
        pools = "no simulators, no TensorFlow"
    else:
        nice = f" (nice +{threads.simulator_nice})" if threads.simulator_nice else ""
        pools = (f"threads: {threads.simulators} simulator{nice}, {threads.intra_op} "
                 f"intra-op, {threads.inter_op} inter-op")
    computes = "" if precision is None else f"; computes in {precision.describe()}"
    return (f"rank {rank} ({role}) on {host}: {len(cpus)} of {node_cpus} CPUs bound "
            f"({cpu_ranges(cpus)}); {pools}{computes}")


def rank_lines(rank: int, role: str, env: EnvConfig | None, train: TrainConfig | None,
               ranks_on_node: int, precision: str | None = None) -> list[str]:
    """What a rank prints first: :func:`rank_line` for this process, and the lines of
    :func:`binding_warning` and :meth:`Precision.warning` when it has them (``env``/``train``
    None: no pools; ``precision``: ``model.precision`` of a rank that trains, None for one
    that does not)."""
    import socket

    cpus, node_cpus = bound_cpus(), os.cpu_count() or 1
    threads = None if env is None or train is None else threads_for(env, train, len(cpus))
    chosen = None if precision is None else this_cpu_precision(precision)
    lines = [rank_line(socket.gethostname(), rank, role, cpus, node_cpus, threads, chosen)]
    warnings = [binding_warning(len(cpus), node_cpus, ranks_on_node),
                None if chosen is None else chosen.warning()]
    return lines + [f"warning: rank {rank} ({role}) {w}" for w in warnings if w]
