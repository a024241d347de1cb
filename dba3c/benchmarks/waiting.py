"""``dba3c bench waiting``: what waiting in a collective costs, polled or blocked.

Collective aggregation waits in a reduce-scatter and an allgather every step. A rank can poll
the nonblocking request (``wait_until``: ``MPI_Test``, then a sleep doubling up to a cap:
``poll-500us`` as most waits in dba3c, ``poll-50us`` or less as the collective aggregation's
waits, ``dist.collective_poll_us``) or block in ``MPI_Wait`` (``block``; MPICH busy-polls a
core in it). A nonblocking collective only advances from one round of its algorithm to the
next inside an MPI call, so the sleeps can add up to one sleep per round. Every rank sleeps
with the timer slack of a dba3c rank
(:func:`~dba3c.distributed.transport.waiting.precise_sleeps`), or ``--timer-slack-ns``. For
each number of ranks W in ``--ranks`` and each of ``--strategies``, this starts
``mpiexec -n W`` of itself and measures, on a vector of ``--params`` float32 (default: the
paper network's 332,295 parameters):

- step_ms: the median time of one reduce-scatter + allgather when every rank starts it at
  once (after a barrier), on rank 0: the latency polling adds to the collective;
- wait_cpu: while rank 0 arrives ``--late-ms`` late every round (a straggler), the CPU time
  the other ranks spend per second of waiting (1.0 = a whole core).

It prints a Markdown table (the figures in docs/benchmarks.md) and one JSON object per point,
with the machine's 1-minute load average when the point started (on a shared machine a
rank that spins gets only its share of a core: read the CPU figures beside the load).

``--algorithm`` picks the collectives' rounds as ``dist.collective_algorithm`` does (``mpi``,
MPICH's own, by default). On the emulated cluster (``DBA3C_MPIEXEC_ARGS``: one rank per node)
``--link-mbit`` names the links' rate, and each point also gives its link share: the bytes a
rank's reduce-scatter and allgather put on its link (2 (W - 1)/W vectors, TCP/IP headers
included) over what the link carries in step_ms, 1.0 when the link never idles.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np

from dba3c.benchmarks.scale.model import wire_bytes
from dba3c.config import COLLECTIVE_ALGORITHMS
from dba3c.distributed.transport.mpi import MpiRequest, MpiTransport
from dba3c.distributed.transport.waiting import (
    TIMER_SLACK_NS,
    WaitSleeps,
    collective_wait,
    precise_sleeps,
    wait_until,
)
from dba3c.errors import UserError
from dba3c.launchers.local import find_mpiexec, launch_environment
from dba3c.learning.params import ShardPlan

PAPER_PARAMS = 332_295  # the paper's network at FC 128 (RGB input padded to 16 channels)
STRATEGIES = ("poll-500us", "poll-50us", "poll-20us", "poll-10us", "quick-50us", "block")


def wait_policy(strategy: str) -> WaitSleeps | None:
    """:func:`~dba3c.distributed.transport.waiting.wait_until`'s sleeps for a strategy:
    ``poll-<N>us`` doubles them up to N us; ``quick-<N>us`` is a collective client's wait at a
    cap of N us (:func:`~dba3c.distributed.transport.waiting.collective_wait`: quick polls
    first); None for ``block``."""
    if strategy == "block":
        return None
    for prefix in ("poll-", "quick-"):
        if strategy.startswith(prefix) and strategy.endswith("us"):
            cap_s = float(strategy[len(prefix):-2]) / 1e6
            return collective_wait(cap_s) if prefix == "quick-" else WaitSleeps(max_sleep_s=cap_s)
    raise ValueError(f"strategy {strategy!r}: expected poll-<N>us, quick-<N>us or block")


def measure(strategy: str, num_params: int, rounds: int, late_s: float,
            slack_ns: int = TIMER_SLACK_NS, algorithm: str = "mpi") -> dict | None:
    """This rank's part of one point; rank 0 returns the point's figures (others None)."""
    t = MpiTransport(algorithm)
    precise_sleeps(slack_ns)
    group = t.split(True)
    assert group is not None, "every rank is a member"
    counts = ShardPlan(num_params, group.size).sizes
    grad = np.ones(num_params, np.float32)
    part = np.zeros(counts[group.rank], np.float32)
    theta = np.zeros(num_params, np.float32)
    policy = wait_policy(strategy)

    def wait(request: MpiRequest) -> None:
        if policy is not None:
            wait_until(request.test, **policy)
        else:
            request.wait()

    def step() -> None:
        wait(group.ireduce_scatter(grad, part, counts))
        wait(group.iallgather(part, theta, counts))

    for _ in range(3):  # warm-up: connections, buffers
        step()
    times = []
    for _ in range(rounds):
        t.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    t.barrier()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        if group.rank == 0:
            time.sleep(late_s)
        step()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    mine = np.array([statistics.median(times), cpu / wall], np.float64)
    every = np.zeros(2 * group.size, np.float64)
    wait_until(group.iallgather(mine, every, [2] * group.size).test)
    t.barrier()
    if group.rank != 0:
        return None
    waiting = every.reshape(group.size, 2)[1:, 1]
    return {"ranks": group.size, "strategy": strategy, "params": num_params,
            "step_ms": round(1000 * float(every[0]), 3),
            "wait_cpu": round(float(np.mean(waiting)), 3), "late_ms": 1000 * late_s,
            "timer_slack_ns": slack_ns, "algorithm": algorithm}


def link_share(ranks: int, num_params: int, step_ms: float, link_mbit: float) -> float:
    """The share of a link of ``link_mbit`` Mbit/s that one rank's reduce-scatter and
    allgather of ``num_params`` float32 among ``ranks`` kept busy in ``step_ms``: their
    2 (W - 1)/W vectors of :func:`~dba3c.benchmarks.scale.model.wire_bytes` over the
    link's bytes in that time."""
    sent = 2 * (ranks - 1) / ranks * wire_bytes(num_params)
    return sent / (link_mbit * 1e6 / 8 * step_ms / 1000)


def run_point(ranks: int, strategy: str, num_params: int, rounds: int, late_ms: float,
              slack_ns: int = TIMER_SLACK_NS, algorithm: str = "mpi") -> dict:
    """One point: ``mpiexec -n RANKS`` of ``dba3c bench waiting --rank-of-point`` (with
    ``DBA3C_MPIEXEC_ARGS`` as ``dba3c launch`` takes them, e.g. the emulated cluster's
    hosts); the figures rank 0 printed."""
    extra = shlex.split(os.environ.get("DBA3C_MPIEXEC_ARGS", ""))
    cmd = [find_mpiexec(), *extra, "-n", str(ranks), sys.executable, "-m", "dba3c", "bench",
           "waiting", "--rank-of-point", strategy, "--params",
           str(num_params), "--rounds", str(rounds), "--late-ms", str(late_ms),
           "--timer-slack-ns", str(slack_ns), "--algorithm", algorithm]
    env = launch_environment()  # as `dba3c launch` starts its ranks
    load = os.getloadavg()[0]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True,
                         timeout=600).stdout
    return {**json.loads(out.strip().splitlines()[-1]), "load": round(load, 1)}


def waiting_table(points: list[dict]) -> str:
    """The Markdown table of the points: per W, the strategies side by side."""
    strategies = list(dict.fromkeys(p["strategy"] for p in points))
    columns = [("step ms", "step_ms"), ("link share", "link_share"),
               ("waiting CPU", "wait_cpu")]
    columns = [(name, key) for name, key in columns if all(key in p for p in points)]
    cells = [(name, key, s) for name, key in columns for s in strategies]
    lines = ["| ranks | " + "".join(f"{name}, {s} | " for name, _, s in cells) + "load |",
             "|---|" + "---|" * (len(cells) + 1)]
    for w in sorted({p["ranks"] for p in points}):
        by = {p["strategy"]: p for p in points if p["ranks"] == w}
        lines.append(f"| {w} | " + "".join(f"{by[s][key]:.2f} | " for _, key, s in cells)
                     + " / ".join(f"{by[s]['load']:g}" for s in strategies) + " |")
    return "\n".join(lines)


def rank_of_point(strategy: str, num_params: int, rounds: int, late_ms: float, slack_ns: int,
                  algorithm: str) -> int:
    """One rank of a point under mpiexec (:func:`run_point`); rank 0 prints the point."""
    point = measure(strategy, num_params, rounds, late_ms / 1000, slack_ns, algorithm)
    if point is not None:
        print(json.dumps(point), flush=True)
    return 0


def waiting_command(ranks: tuple[int, ...], strategies: str | None, num_params: int | None,
                    rounds: int, late_ms: float, slack_ns: int | None, algorithm: str,
                    link_mbit: float) -> int:
    """``dba3c bench waiting``: measure every point of ``ranks`` x ``strategies``
    (comma-separated; None: :data:`STRATEGIES`) on vectors of ``num_params`` (None:
    :data:`PAPER_PARAMS`); print the points, then the table."""
    chosen = strategies.split(",") if strategies else list(STRATEGIES)
    for strategy in chosen:
        try:
            wait_policy(strategy)
        except ValueError as e:
            raise UserError(f"--strategies {strategies}: {e}") from None
    if algorithm not in COLLECTIVE_ALGORITHMS:
        raise UserError(f"--algorithm {algorithm}: one of {', '.join(COLLECTIVE_ALGORITHMS)}")
    num_params = PAPER_PARAMS if num_params is None else num_params
    slack_ns = TIMER_SLACK_NS if slack_ns is None else slack_ns
    points = []
    for w in ranks:
        for strategy in chosen:
            point = run_point(w, strategy, num_params, rounds, late_ms, slack_ns, algorithm)
            if link_mbit:
                point.update(link_mbit=link_mbit, link_share=round(link_share(
                    w, num_params, point["step_ms"], link_mbit), 3))
            points.append(point)
            print(json.dumps(point), file=sys.stderr, flush=True)
    print(waiting_table(points))
    return 0
