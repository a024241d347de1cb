"""``dba3c bench --scale``: the distributed layer at scale, on the emulated cluster.

Every grid point is a run of synthetic workers (no TensorFlow, see
``dba3c/distributed/synthetic.py``) on
the emulated cluster of ``slurm/local-cluster.sh``: one rank per emulated node, so every
worker and parameter server has its own shaped link. Consecutive points with the same link
rate run as one MPI job (``dba3c/benchmarks/scale/job.py``) of as many ranks as the largest of
them, which starts its ranks, imports and connections once; a job that fails or runs past
``--point-timeout`` in a point is ended whole (``dba3c/benchmarks/proctree.py``), the point
recorded as failed, and the points after it run in a new job. W workers, P
parameter servers, the paper network at FC H, optionally backup workers (R of W gradients per
step) and stragglers, over links of 10 or 100 Gb/s; or with ``--aggregation collective`` the
same W without parameter servers (each worker owns a shard: reduce-scatter, Adam,
allgather). Time is scaled by s: links run at
rate / s and each worker computes for T_c x s per step, so the many ranks of a 64-worker point
leave the machine unsaturated; the steady-state step time divided by s estimates the real
one, and the scaling efficiency is E = T_c / T_step. The machine's CPU use in the steady
window is reported so a saturated point can be told apart, and each point carries the
analytic model's step time (:func:`model_step_seconds`) for comparison.

The cluster is started once with as many nodes as the largest point has ranks (a smaller
point uses the first nodes), reshaped once per link rate, and stopped at the end.
"""

from __future__ import annotations

import json
import math
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import IO, TYPE_CHECKING, Any, TypeVar

from dba3c.benchmarks.emulated import EmulatedCluster, link_rate, require_emulation
from dba3c.benchmarks.proctree import EXITED, INTERRUPTED, TIMED_OUT, Interrupt, ProcessTree
from dba3c.benchmarks.scale.job import JobRun, job_event, write_job
from dba3c.config import Config, DistConfig
from dba3c.distributed.roles import overlaps, required_world_size
from dba3c.distributed.synthetic import stage_seconds
from dba3c.errors import Interrupted, UserError
from dba3c.games.envs import env_spaces, spaces_key
from dba3c.learning.models import NetSpec, make_net_spec
from dba3c.learning.params import layer_buckets
from dba3c.preset import load_config, num_params_of
from dba3c.training.rundir import RunDir, write_atomic

if TYPE_CHECKING:
    from dba3c.benchmarks.node import RssSampler

_T = TypeVar("_T")

# T_c assumed for one 12-core node of the paper: docs/benchmarks.md measured 77 ms per step on
# 2 cores and scales it by 2/12 at equal efficiency (~13 ms); an assumption, not a measurement
DEFAULT_COMPUTE_MS = 77.0 * 2 / 12
COMPUTE_MS_SOURCE = ("assumed: 77 ms per step measured on 2 cores (docs/benchmarks.md) "
                     "x 2/12 for a 12-core node")


# Each link rate runs at its own multiple of the time scale: 100 Gb/s at s = 10 would push
# 10 Gbit/s through veth links on this machine's cores, so it runs 5x slower (2 Gbit/s)
LINK_TIME_SCALE = {10: 1.0, 100: 5.0}
# A TCP segment on a veth link (MTU 1500) carries at most 1448 payload bytes and costs
# 14 (Ethernet) + 20 (IPv4) + 32 (TCP with timestamps) more on the wire
WIRE_PER_PAYLOAD = (1448 + 14 + 20 + 32) / 1448
ADAM_S_PER_PARAM = 10e-9  # docs/benchmarks.md: Adam on N/P floats takes N/P x 10 ns
# One message round of a collective step costs about 1.4 poll caps (dist.collective_poll_us):
# fitted on the emulated cluster, where W = 16 with MPICH's algorithm (30 rounds) stepped
# 1.5 ms slower than with recursive halving/doubling (8 rounds) at 50 us caps, 68 us per
# round (docs/benchmarks.md, 2026-11-23). A real network adds its own latency per round.
ROUND_POLL_CAPS = 1.4
SCALE_JSON = "scale.json"  # dba3c bench --scale's results, beside bench/results.json
# Bytes per second of the steps' traffic the emulating host moves without saturating: on 2
# cores (2026-11-24, W = 64, 72 namespaces) 133-190 MB/s kept them 66-91% busy and the steps
# within 7% of the model; 297 MB/s saturated them (step 55.6 ms, model 30.1)
HOST_BUDGET = 150e6
STALL_TIMEOUT_S = 60.0  # a point whose steps stop ends after this, not after the default 300 s
# --point-timeout's default: a point still running after this is ended (steps that crawl at
# 50 s each never trip the stall watchdog; one ran for 8 minutes)
POINT_TIMEOUT_S = 300.0
# Records a point's steady step time needs (steps after the warm-up, less the run's last):
# with 4, a chief that logged two steps one step late at the window's start halved the
# estimate (make test, 2026-11-26: 2 of 7 runs); steps logged one step late, in runs of any
# length starting anywhere, never moved it by more than 3% from 6 records on (simulated)
MIN_STEADY_RECORDS = 6


@dataclass(frozen=True)
class ScalePoint:
    """One run of the grid: W workers, P parameter servers, FC ``hidden``; ``replicas``
    gradients per step (0 = all); the last ``slow_workers`` take ``slow_factor`` x T_c;
    links of ``link_gbit`` Gb/s; ``aggregation`` ps, or collective (then P = 0); ``overlap``:
    the collectives move the vector bucket by bucket while the workers compute
    (``dist.collective_overlap``; the model is then :func:`overlapped_step_seconds`)."""

    workers: int
    ps: int
    hidden: int = 128
    replicas: int = 0
    slow_workers: int = 0
    slow_factor: float = 2.0
    link_gbit: int = 10
    aggregation: str = "ps"
    overlap: bool = False

    def overrides(self) -> list[str]:
        """The config overrides of this point."""
        return [f"model.hidden={self.hidden}", f"dist.replicas_to_aggregate={self.replicas}",
                f"synthetic.slow_workers={self.slow_workers}",
                f"synthetic.slow_factor={self.slow_factor}",
                f"dist.aggregation={self.aggregation}", f"dist.ps={self.ps}",
                *([f"dist.collective_overlap={str(self.overlap).lower()}"]
                  if self.aggregation == "collective" else [])]


def collective_grid(quick: bool) -> list[ScalePoint]:
    """The points of ``--aggregation collective``: over 10 Gb/s links W at FC 128, FC sizes
    and stragglers at the largest W; over 100 Gb/s links W at FC 128 (``quick``: up to 16
    workers). No W = 1: one collective rank is a world of one, which trains in one process
    and cannot run synthetic compute (and has nothing to communicate: E = 1)."""
    sizes, top, fcs = ((4, 16), 16, (32, 512)) if quick else (
        (2, 4, 8, 16, 32, 64), 64, (32, 256, 512))
    points = [ScalePoint(w, 0, aggregation="collective") for w in sizes]
    points += [ScalePoint(top, 0, hidden=h, aggregation="collective") for h in fcs]
    points.append(ScalePoint(top, 0, slow_workers=top // 16, aggregation="collective"))
    points += [ScalePoint(w, 0, link_gbit=100, aggregation="collective") for w in sizes]
    return points


def scale_grid(quick: bool) -> list[ScalePoint]:
    """The points measured, grouped by link rate (each group is one MPI job of as many ranks
    as its largest point, :func:`job_groups`): over 10 Gb/s links W x P at FC 128, FC sizes
    and P at the largest W, and backup workers (R = W - W/16) with and without stragglers;
    over 100 Gb/s links W at P = 1 and 4, FC 128. Started one ``dba3c launch`` each, a
    64-worker point spent 40-190 s starting 68 ranks on 2 loaded cores; in one job they start
    once per link rate. ``quick`` is a 16-worker version with two 100 Gb/s points."""
    sizes: tuple[int, ...]
    servers: tuple[int, ...]
    fcs: tuple[int, ...]
    if quick:
        sizes, servers, top, fcs = (1, 4, 16), (1, 4), 16, (32, 512)
        fast = [ScalePoint(w, 4, link_gbit=100) for w in (4, 16)]
    else:
        sizes, servers, top, fcs = (1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8), 64, (32, 256, 512)
        fast = [ScalePoint(w, p, link_gbit=100) for w in sizes for p in (1, 4)]
    points = [ScalePoint(w, p) for w in sizes for p in servers]
    points += [ScalePoint(top, 4, hidden=h) for h in fcs]
    if not quick:
        points += [ScalePoint(top, p) for p in (3, 5, 6, 7)]
    backups = top - top // 16
    points += [ScalePoint(top, 4, replicas=backups),
               ScalePoint(top, 4, replicas=backups, slow_workers=top // 16),
               ScalePoint(top, 4, slow_workers=top // 16)]
    return list(dict.fromkeys(points + fast))


def steps_for(point: ScalePoint, quick: bool) -> tuple[int, int]:
    """(steps, warm-up steps) of a point: fewer at 32 workers and more (chosen when each
    point was a launch of its own, which took a minute or more there on a small machine)."""
    if quick:
        return 10, 3
    return (10, 3) if point.workers >= 32 else (12, 4)


def point_time_scale(point: ScalePoint, time_scale: float) -> float:
    """The time scale s of a point: ``time_scale`` x its link rate's factor
    (``LINK_TIME_SCALE``)."""
    return time_scale * LINK_TIME_SCALE[point.link_gbit]


def wire_bytes(num_params: int) -> float:
    """The bytes of one float32 vector of ``num_params`` on a link, TCP/IP headers included."""
    return 4 * num_params * WIRE_PER_PAYLOAD


def step_bytes(point: ScalePoint, num_params: int) -> float:
    """The bytes one step moves over all links, TCP/IP headers included (ps: a gradient in
    and a parameter vector out per worker; collective: 2 (W - 1) vectors over all nodes)."""
    vectors = (2 * (point.workers - 1) if point.aggregation == "collective"
               else 2 * point.workers)
    return vectors * wire_bytes(num_params)


def grid_time_scales(grid: list[ScalePoint], time_scale: float,
                     num_params: Callable[[ScalePoint], int], compute_s: float,
                     buckets: Callable[[ScalePoint], tuple[Bucket, ...]] = lambda point: ()
                     ) -> list[float]:
    """The time scale s of every point of ``grid``: :func:`point_time_scale`, multiplied by
    the smallest whole k for which no point with the same W and link rate moves more than
    ``HOST_BUDGET`` bytes per second through the emulating host at the analytic model's
    step time (its steps' bytes / (model step x s)). One s per W and link rate, so that
    such points share the links' shape; the large points get the slower clock they need
    (at s = 10, 64 workers x 8 PS saturated two cores and stepped 85% over the model)."""
    def needed(point: ScalePoint) -> int:
        s, n = point_time_scale(point, time_scale), num_params(point)
        step_s = model_step_seconds(point, n, compute_s, s, buckets=buckets(point))
        return max(1, math.ceil(step_bytes(point, n) / (HOST_BUDGET * step_s * s)))

    k: dict[tuple[int, int], int] = {}
    for point in grid:
        key = (point.link_gbit, point.workers)
        k[key] = max(k.get(key, 1), needed(point))
    return [point_time_scale(p, time_scale) * k[(p.link_gbit, p.workers)] for p in grid]


def model_step_seconds(point: ScalePoint, num_params: int, compute_s: float,
                       time_scale: float, host_bytes_per_s: float | None = None,
                       algorithm: str = DistConfig.collective_algorithm,
                       poll_s: float = DistConfig().collective_poll_s,
                       buckets: Sequence[Bucket] = ()) -> float:
    """The analytic step time of docs/benchmarks.md for a point (seconds, unscaled): the
    compute time, then the transfers (:func:`comm_seconds`), plus Adam on N/P floats (N/W with
    collective aggregation), which runs in real time and so shrinks by the time scale in an
    emulated measurement. Stragglers among the gradients a step waits for: with collective
    aggregation every rank waits for the slowest compute (x ``slow_factor``), then the
    collectives' message rounds follow (:func:`collective_rounds` of ``algorithm`` x
    ``ROUND_POLL_CAPS`` x ``poll_s``, the unscaled ``dist.collective_poll_us``); in ps mode
    they add :func:`straggler_seconds`. With ``host_bytes_per_s`` the transfers take at
    least :func:`host_seconds` (the emulating host's cores as the limit). A collective point
    that overlaps (``point.overlap``) steps at :func:`overlapped_step_seconds` of its
    ``buckets`` (:func:`net_buckets`; none given: the whole vector as one bucket, which is
    the serial model), every rank computing at the slowest rank's pace."""
    if point.aggregation == "collective" and point.overlap:
        slowest = point.slow_factor if point.slow_workers else 1.0
        stages = overlap_stages(buckets or (Bucket(num_params, 1),), point.workers,
                                compute_s * slowest,
                                collective_rate(point, host_bytes_per_s, time_scale),
                                algorithm, poll_s)
        return overlapped_step_seconds(
            stages, ADAM_S_PER_PARAM * num_params / point.workers / time_scale)
    comm = comm_seconds(point, num_params)
    if host_bytes_per_s:
        comm = max(comm, host_seconds(point, num_params, host_bytes_per_s, time_scale))
    if point.aggregation == "collective":
        slowest = point.slow_factor if point.slow_workers else 1.0
        exchange = (compute_s * slowest + comm
                    + collective_rounds(point.workers, algorithm) * ROUND_POLL_CAPS * poll_s)
        shards = point.workers
    else:
        exchange = compute_s + comm + straggler_seconds(point, num_params, compute_s)
        shards = point.ps
    return exchange + ADAM_S_PER_PARAM * num_params / shards / time_scale


@dataclass(frozen=True)
class Bucket:
    """One layer's share of a network: ``params`` parameters (its bucket of the flat
    vector, :func:`dba3c.learning.params.layer_buckets`) and ``flops``, its stage's forward FLOPs
    per state."""

    params: int
    flops: int


def net_buckets(spec: NetSpec) -> tuple[Bucket, ...]:
    """The buckets of ``spec``'s parameter vector (one per layer with parameters, the heads
    in the last), each with its stage's forward FLOPs (:meth:`NetSpec.stage_flops`)."""
    layout = spec.layout()
    starts = layer_buckets(layout)
    ends = (*starts[1:], layout.num_params)
    return tuple(Bucket(hi - lo, flops)
                 for lo, hi, flops in zip(starts, ends, spec.stage_flops(), strict=True))


def buckets_of(cfg: Config) -> tuple[Bucket, ...]:
    """:func:`net_buckets` of the configured network."""
    return net_buckets(make_net_spec(cfg.model, *env_spaces(cfg)))


@dataclass(frozen=True)
class Stage:
    """One stage of an overlapped collective step (seconds): its forward and backward
    compute, and the time its bucket's reduce-scatter and allgather each hold the link."""

    forward_s: float
    backward_s: float
    reduce_scatter_s: float
    allgather_s: float


def overlap_stages(buckets: Sequence[Bucket], workers: int, compute_s: float,
                   rate_bytes_per_s: float, algorithm: str, poll_s: float) -> list[Stage]:
    """The stages of a step of ``compute_s`` = T_c over ``workers`` = W ranks. Compute in
    proportion to FLOPs: stage b runs F_b / D x T_c forward and 2 F_b / D x T_c backward
    (F_0 / D for stage 0, which computes no input gradient), D = the sum of all of them.
    Bucket b's reduce-scatter and allgather each hold the link for the time its bytes take,
    (W - 1)/W x ``wire_bytes``(N_b) / rate (summed over the buckets, the serial model's
    :func:`comm_seconds`), plus its message rounds, :func:`phase_rounds` x
    ``ROUND_POLL_CAPS`` x ``poll_s``."""
    forward, backward = stage_seconds(compute_s, [b.flops for b in buckets])
    rounds_s = phase_rounds(workers, algorithm) * ROUND_POLL_CAPS * poll_s
    share = (workers - 1) / workers
    stages = []
    for bucket, forward_s, backward_s in zip(buckets, forward, backward, strict=True):
        link_s = share * wire_bytes(bucket.params) / rate_bytes_per_s + rounds_s
        stages.append(Stage(forward_s, backward_s, link_s, link_s))
    return stages


def collective_rate(point: ScalePoint, host_bytes_per_s: float | None,
                    time_scale: float) -> float:
    """Bytes per second through a collective node's link: ``link_gbit``; with
    ``host_bytes_per_s`` = H at most H s / W, the emulating host moving every node's bytes
    (:func:`host_seconds`: 2 (W - 1) vectors per step, W times a node's 2 (W - 1)/W)."""
    rate = point.link_gbit * 1e9 / 8
    if host_bytes_per_s:
        rate = min(rate, host_bytes_per_s * time_scale / point.workers)
    return rate


def overlapped_step_starts(stages: Sequence[Stage], tail_s: float, steps: int) -> list[float]:
    """When each of ``steps`` steps starts its forward pass (stage 0), on one rank of a
    collective step that overlaps communication with compute, from a start with every
    parameter in place and the link idle. The discrete-event timeline of a step:

    - forward: stage b = 0, 1, ..., B - 1 runs ``forward_s`` once stage b - 1 is done and
      bucket b's allgather of the step before has completed;
    - backward: stage b = B - 1, ..., 0 runs ``backward_s``; as each ends, bucket b's
      reduce-scatter is posted;
    - after the last reduce-scatter (bucket 0), ``tail_s`` (Adam on the rank's shard; the
      control allreduce runs beside bucket 0's reduce-scatter, as the serial step posts it
      beside the whole vector's); then the allgathers of buckets 0, 1, ..., B - 1 are posted.

    The link carries one collective at a time, in the order they were posted (FIFO): each
    holds it for its ``reduce_scatter_s`` or ``allgather_s``, bytes and message rounds
    together. The rounds hold the link because each round's sends wait for the round
    before's receives: one collective's rounds are its critical path, and two outstanding
    collectives share the poll caps (the term ROUND_POLL_CAPS fits) that their rounds wait
    for; counting them once per collective is the conservative choice, exact when one
    collective is outstanding.

    Every time is a sum and max of durations, so no duration made shorter makes a step
    later. Bucket 0's reduce-scatter is the last collective of a step, so the link is idle
    when the allgathers are posted: from the second step on, a step starts as bucket 0's
    allgather ends with buckets 1.. still to come back to back, the same state every time,
    and the starts are evenly spaced (:func:`overlapped_step_seconds`)."""
    link_free = 0.0  # when the link has carried every collective posted so far
    compute_free = 0.0  # when the rank's compute thread is done with what it has run
    ready = [0.0] * len(stages)  # when each bucket's parameters of the last step arrived
    starts = []
    for _ in range(steps):
        for b, stage in enumerate(stages):
            compute_free = max(compute_free, ready[b])
            if b == 0:
                starts.append(compute_free)
            compute_free += stage.forward_s
        for stage in reversed(stages):
            compute_free += stage.backward_s
            link_free = max(link_free, compute_free) + stage.reduce_scatter_s
        link_free += tail_s
        for b, stage in enumerate(stages):
            link_free += stage.allgather_s
            ready[b] = link_free
    return starts


def overlapped_step_seconds(stages: Sequence[Stage], tail_s: float) -> float:
    """The steady step period of :func:`overlapped_step_starts`: the second and third
    steps' starts apart (every step from the second on is the same). It is at least the
    compute cycle T_c + reduce-scatter_0 + tail + allgather_0 (bucket 0's parameters come
    back only after its gradient left) and the link cycle, every collective + tail + the
    last stage's forward and backward (its gradient leaves after its parameters came): the
    first when the other collectives hide behind compute, the second when the link waits
    for nothing but the last stage. With one bucket both are the serial model, T_c + both
    collectives + tail."""
    _, second, third = overlapped_step_starts(stages, tail_s, 3)
    return third - second


def straggler_seconds(point: ScalePoint, num_params: int, compute_s: float) -> float:
    """ps mode: how much later the parameter servers' links have taken the gradients a
    step waits for when stragglers (``slow_factor`` x T_c) are among them. The others'
    gradients come in from T_c; a straggler's comes at ``slow_factor`` x T_c and waits
    behind them while the link is still busy, so the link's busy time hides that much of
    the straggler's extra compute. Backup workers (R of W) leave out up to W - R of them."""
    waited = point.replicas or point.workers
    num_slow = max(0, point.slow_workers - (point.workers - waited))
    if not num_slow:
        return 0.0
    shard, vector = link_seconds(point, num_params)
    on_time = compute_s + max(waited * shard, vector)
    others_in = compute_s + max((waited - num_slow) * shard, vector)
    late = max(others_in + num_slow * shard,
               compute_s * point.slow_factor + max(num_slow * shard, vector))
    return late - on_time


def phase_rounds(workers: int, algorithm: str) -> int:
    """Message rounds of one reduce-scatter or one allgather among ``workers`` ranks:
    ceil(log2 W) by recursive halving / doubling (``dist.collective_algorithm`` recursive)
    or W - 1 by MPICH's pairwise exchange and ring (mpi); none for one rank."""
    if workers < 2:
        return 0
    return math.ceil(math.log2(workers)) if algorithm == "recursive" else workers - 1


def collective_rounds(workers: int, algorithm: str) -> int:
    """Message rounds of one collective step: a reduce-scatter then an allgather, each
    :func:`phase_rounds`."""
    return 2 * phase_rounds(workers, algorithm)


def link_seconds(point: ScalePoint, num_params: int) -> tuple[float, float]:
    """(one parameter server's shard, a whole vector) through one link of ``link_gbit``: the
    vector's M bytes with TCP/IP headers, a shard M / P of them."""
    vector = wire_bytes(num_params) / (point.link_gbit * 1e9 / 8)
    return vector / max(point.ps, 1), vector


def comm_seconds(point: ScalePoint, num_params: int) -> float:
    """A step's transfer time when every worker computes T_c. ps: each PS link takes the R
    gradient shards a step waits for (R = W without backup workers), then sends W parameter
    shards, one after the other; neither direction takes less than a whole vector through a
    worker's own link. collective: the ring reduce-scatter and allgather each move
    (W - 1)/W M through every node's link, whatever W (MPI's own algorithms for these sizes
    move the same bytes per node)."""
    shard, vector = link_seconds(point, num_params)
    if point.aggregation == "collective":
        return 2 * (point.workers - 1) / point.workers * vector
    waited = point.replicas or point.workers
    return max(waited * shard, vector) + max(point.workers * shard, vector)


def host_seconds(point: ScalePoint, num_params: int, host_bytes_per_s: float,
                 time_scale: float) -> float:
    """How long the emulating host needs for a step's transfers (seconds, unscaled): every
    byte of a step (ps: 2 W vectors; collective: 2 (W - 1) vectors over all nodes, TCP/IP
    headers included) goes through its TCP stack and MPI on its few cores at
    ``host_bytes_per_s``, in real time, so divided by the time scale. A real cluster spreads
    that work over its nodes."""
    return step_bytes(point, num_params) / host_bytes_per_s / time_scale


def steady_step_seconds(metrics: list[dict], warmup: int) -> float:
    """Seconds per global step after the first ``warmup`` steps: the median, per step, of
    the chief's ``time_s`` differences between neighbouring records and between records two
    apart. A chief that trains logs the steps it learnt of when it next waits, so a step can
    be logged late, together with the next: once in a while (intervals 0.66, 1.32, 0.01 s for
    a steady 0.66 s: the neighbours' median ignores such a pair) or at every other step
    (1.37, 0.01, 1.37, ...: the neighbours' median was half a step, 2026-11-25; the spans of
    two steps are exact there). Together their median holds in both cases, where the slope
    between the window's ends or the median slope between all pairs would not (a pair at
    the end of a short window pulled the latter 10% under the true step). The last record
    is left out: the run's final step is logged a few ms after the one before it (measured:
    4-9 ms in a 2-worker run stepping every 110 ms). A late step at the window's start has
    no span into it, only spans out of it, all short: a window needs ``MIN_STEADY_RECORDS``
    records for the median to hold (:class:`PointPlan`)."""
    tail = [m for m in metrics if m["step"] > warmup][:-1]
    if len(tail) < 2:
        raise ValueError(f"{len(tail)} metrics records after a warm-up of {warmup} steps: "
                         f"need at least 2")
    spans = [*pairwise(tail), *zip(tail, tail[2:])]
    return median((b["time_s"] - a["time_s"]) / (b["step"] - a["step"]) for a, b in spans)


def cpu_times(stat_line: str) -> tuple[int, int]:
    """(busy, total) jiffies from the ``cpu`` line of /proc/stat (idle and iowait are not
    busy)."""
    values = [int(x) for x in stat_line.split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def busy_fraction(samples: list[tuple[int, int, int]], warmup: int) -> float | None:
    """The machine's CPU use between the first and the last sample (steps logged, busy,
    total) taken once more than ``warmup`` steps were logged; None without two of them."""
    steady = [(busy, total) for lines, busy, total in samples if lines > warmup]
    if len(steady) < 2 or steady[-1][1] == steady[0][1]:
        return None
    return (steady[-1][0] - steady[0][0]) / (steady[-1][1] - steady[0][1])


class CpuSampler(threading.Thread):
    """Samples /proc/stat and the number of lines of a run's metrics.jsonl every
    ``interval`` seconds until stopped."""

    def __init__(self, metrics: Path, interval: float = 0.5):
        super().__init__(daemon=True)
        self.metrics, self.interval = metrics, interval
        self.samples: list[tuple[int, int, int]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            lines = (len(self.metrics.read_bytes().splitlines())
                     if self.metrics.is_file() else 0)
            with open("/proc/stat", encoding="ascii") as f:
                busy, total = cpu_times(f.readline())
            self.samples.append((lines, busy, total))

    def stop(self) -> list[tuple[int, int, int]]:
        """Stop sampling; every sample taken."""
        self._done.set()
        self.join()
        return self.samples


@dataclass(frozen=True)
class PointPlan:
    """A point as the bench runs it: at time scale ``time_scale``, ``steps`` steps of which
    the first ``warmup`` are left out of the steady step time."""

    point: ScalePoint
    time_scale: float
    steps: int
    warmup: int

    def __post_init__(self) -> None:
        if self.steps - self.warmup - 1 < MIN_STEADY_RECORDS:
            raise ValueError(f"{self.steps} steps with {self.warmup} of warm-up leave "
                             f"{self.steps - self.warmup - 1} records for the steady step "
                             f"time: need at least {MIN_STEADY_RECORDS}")


def point_overrides(plan: PointPlan, poll: DistConfig, compute_ms: float,
                    run_dir: Path) -> list[str]:
    """The overrides of a point's synthetic run in ``run_dir``: its own (:meth:`ScalePoint.
    overrides`), T_c x s of compute, no evaluation, a metrics record every step, the stall
    watchdog at ``STALL_TIMEOUT_S``, and the poll caps of ``poll`` x s."""
    s = plan.time_scale
    return [*plan.point.overrides(), "synthetic.enabled=true",
            f"synthetic.compute_ms={compute_ms * s:g}", "eval.every=0", "eval.rank=false",
            f"train.max_steps={plan.steps}", "train.max_seconds=0", "run.progress=none",
            "run.log_every=1", "run.checkpoint_every=0",
            f"dist.stall_timeout={STALL_TIMEOUT_S:g}",
            f"dist.poll_max_ms={poll.poll_max_ms * s:g}",
            f"dist.collective_poll_us={poll.collective_poll_us * s:g}", f"run.dir={run_dir}"]


def point_result(plan: PointPlan, cfg: Config, metrics: list[dict],
                 samples: list[tuple[int, int, int]], peak_mb: dict[str, float],
                 compute_ms: float, host_bytes_per_s: float | None) -> dict:
    """What a point measured (its ``metrics`` records, CPU ``samples``, peak RSS by rank)
    beside the analytic model's step time (with ``host_bytes_per_s`` also the model with the
    emulating host's cores as a limit, :func:`host_seconds`)."""
    point, s = plan.point, plan.time_scale
    step_s = steady_step_seconds(metrics, plan.warmup) / s
    replicas = point.replicas or point.workers
    num_params, buckets = num_params_of(cfg), buckets_of(cfg)
    # the point's poll caps are multiplied by its time scale (job_runs)
    algorithm, poll_s = cfg.dist.collective_algorithm, cfg.dist.collective_poll_s / s
    model_s = model_step_seconds(point, num_params, compute_ms / 1000, s, algorithm=algorithm,
                                 poll_s=poll_s, buckets=buckets)
    emulated_s = model_step_seconds(point, num_params, compute_ms / 1000, s, host_bytes_per_s,
                                    algorithm, poll_s, buckets)
    return {**asdict(point), "time_scale": s, "steps": plan.steps,
            "warmup_steps": plan.warmup, "step_ms": 1000 * step_s,
            "model_step_ms": 1000 * model_s, "emulated_model_step_ms": 1000 * emulated_s,
            "efficiency": compute_ms / 1000 / step_s,
            "data_points_per_s": replicas * cfg.train.batch_size / step_s,
            "cpu_busy": busy_fraction(samples, plan.warmup),
            "peak_rss_mb": peak_by_role(peak_mb, point.ps,
                                        required_world_size(cfg, point.workers))}


def failed_point(plan: PointPlan, error: str) -> dict:
    """The record of a point that could not be measured."""
    return {**asdict(plan.point), "time_scale": plan.time_scale, "error": error[-1000:]}


def job_groups(plans: list[PointPlan]) -> list[list[PointPlan]]:
    """The MPI jobs of a grid: runs of consecutive points with the same link rate and time
    scale, so the same shaped rate (the emulated cluster is reshaped only between jobs)."""
    def shape(plan: PointPlan) -> tuple[int, float]:
        return plan.point.link_gbit, plan.time_scale

    groups: list[list[PointPlan]] = []
    for plan in plans:
        if groups and shape(groups[-1][-1]) == shape(plan):
            groups[-1].append(plan)
        else:
            groups.append([plan])
    return groups


def unfinished(points: Sequence[_T], ended: int) -> tuple[_T | None, list[_T]]:
    """After a job that ended (its end line) the first ``ended`` of its ``points``: the point
    it was running when it stopped (None: it ended every one) and the points after that one,
    which a new job runs."""
    if ended >= len(points):
        return None, []
    return points[ended], list(points[ended + 1:])


def job_failure(how: str, returncode: int | None, stderr_tail: str, timeout_s: float,
                logged: int, steps: int) -> str:
    """Why the point a job was running did not end: ended past ``--point-timeout`` with
    ``logged`` of its ``steps`` steps logged, or the job exited (its stderr's tail)."""
    if how == TIMED_OUT:
        return timeout_message(timeout_s, logged, steps)
    return f"job exited {returncode}: {stderr_tail}"


def job_runs(config: str, overrides: list[str], plans: list[PointPlan], compute_ms: float,
             run_dirs: list[Path]) -> list[JobRun]:
    """The runs of a job for these points (each in its run directory of ``run_dirs``), laid
    out as ``dba3c launch --workers W --ps P`` would."""
    from dba3c.launchers.local import launch_layout

    runs = []
    for plan, run_dir in zip(plans, run_dirs, strict=True):
        poll = load_config(config, [*overrides, *plan.point.overrides()]).dist
        extra, ranks = launch_layout(
            config, [*overrides, *point_overrides(plan, poll, compute_ms, run_dir)],
            workers=plan.point.workers, ps=plan.point.ps, evaluator=False)
        runs.append(JobRun(config, tuple(extra), ranks))
    return runs


class _JobWatch:
    """The driver's side of a running job: rank 0's start / end lines (read by a thread,
    handled in the waiting thread by :meth:`deadline`) start and stop the point's CPU
    sampler and peak RSS, and an ended point is measured at once."""

    def __init__(self, run_dirs: list[Path], stdout: IO[str], rss: RssSampler,
                 point_timeout: float,
                 measure: Callable[[int, list[tuple[int, int, int]], dict[str, float]], None]):
        self.run_dirs = run_dirs
        self.rss, self.point_timeout, self.measure = rss, point_timeout, measure
        self.ended, self.started_at = 0, time.monotonic()  # job start counts till point 0's
        self._events: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
        self._cpu: CpuSampler | None = None
        self._reader = threading.Thread(target=self._read, args=(stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            event = job_event(line)
            if event is not None:
                self._events.put(event)

    def deadline(self) -> float:
        """Handle the lines read so far; when the running point must have ended."""
        while not self._events.empty():
            kind, index = self._events.get()
            if kind == "start":
                self.started_at = time.monotonic()
                self._cpu = CpuSampler(RunDir(self.run_dirs[index]).metrics_path)
                self._cpu.start()
                self.rss.restart()
            elif self._cpu is not None:
                samples, self._cpu = self._cpu.stop(), None
                self.ended = index + 1
                self.measure(index, samples, self.rss.restart())
        return self.started_at + self.point_timeout

    def finish(self, drain: bool) -> None:
        """After the job: handle the last lines if ``drain`` (not when the job was ended: rank
        0 stops a run early on SIGTERM, and that run did not end by itself)."""
        self._reader.join()
        if drain:
            self.deadline()
        if self._cpu is not None:
            self._cpu.stop()


def run_points(config: str, overrides: list[str], plans: list[PointPlan], *,
               compute_ms: float, mpiexec_args: list[str] | None = None,
               host_bytes_per_s: float | None = None, point_timeout: float = POINT_TIMEOUT_S,
               interrupt: Interrupt | None = None,
               done: Callable[[PointPlan, dict], None] = lambda plan, result: None
               ) -> list[dict]:
    """The points of ``plans`` in order as one MPI job of synthetic ranks
    (``dba3c.benchmarks.scale.job``; with ``mpiexec_args``: on the emulated cluster), until one
    fails: a record per point, handed to ``done`` as soon as it is known (:func:`point_result`,
    or :func:`failed_point` when the job exits or runs past ``point_timeout`` seconds in one
    point, counted from its start line; then the job's whole process tree is ended and the
    records stop there: the caller runs the rest as a new job). A signal caught by
    ``interrupt`` ends the tree and raises :class:`~dba3c.errors.Interrupted`."""
    from dba3c.benchmarks.node import RssSampler
    from dba3c.launchers.local import find_mpiexec, launch_environment

    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dba3c-scale-") as tmp, \
            tempfile.TemporaryFile("w+") as stderr:
        run_dirs = [Path(tmp) / f"point{i}" for i in range(len(plans))]
        runs = job_runs(config, overrides, plans, compute_ms, run_dirs)
        configs = [load_config(r.config, list(r.overrides)) for r in runs]
        spaces = {spaces_key(c): env_spaces(c) for c in configs}  # opened here, not per rank
        write_job(Path(tmp) / "job.json", runs, list(spaces.items()))
        cmd = [find_mpiexec(), *(mpiexec_args or []), "-n", str(max(r.ranks for r in runs)),
               sys.executable, "-m", "dba3c.benchmarks.scale.job", str(Path(tmp) / "job.json")]

        def measure(index: int, samples: list[tuple[int, int, int]],
                    peak_mb: dict[str, float]) -> None:
            plan, metrics = plans[index], RunDir(run_dirs[index]).read_metrics()
            try:
                r = point_result(plan, configs[index], metrics, samples, peak_mb, compute_ms,
                                 host_bytes_per_s)
            except ValueError as e:  # too few steps logged to measure
                r = failed_point(plan, str(e))
            results.append(r)
            done(plan, r)

        tree = ProcessTree(cmd, env=launch_environment(), stdout=subprocess.PIPE,
                           stderr=stderr, text=True)
        rss = RssSampler(tree.pid, interval=0.5)
        rss.start()
        assert tree.proc.stdout is not None
        watch = _JobWatch(run_dirs, tree.proc.stdout, rss, point_timeout, measure)
        how = tree.wait(interrupt, watch.deadline)
        watch.finish(drain=how == EXITED)
        rss.stop()
        if how == INTERRUPTED:
            assert interrupt is not None and interrupt.signum is not None
            raise Interrupted(interrupt.signum)
        stopped, _ = unfinished(plans, watch.ended)
        if stopped is not None:
            stderr.seek(0)
            logged = logged_steps(RunDir(run_dirs[watch.ended]).read_metrics())
            r = failed_point(stopped, job_failure(how, tree.returncode, stderr.read()[-2000:],
                                                  point_timeout, logged, stopped.steps))
            results.append(r)
            done(stopped, r)
    return results


def run_point(config: str, overrides: list[str], point: ScalePoint, *, compute_ms: float,
              time_scale: float, steps: int, warmup: int,
              mpiexec_args: list[str] | None = None,
              host_bytes_per_s: float | None = None,
              point_timeout: float = POINT_TIMEOUT_S,
              interrupt: Interrupt | None = None) -> dict:
    """One point as an MPI job of its own (:func:`run_points`): its steady step time,
    efficiency, throughput, the machine's CPU use, peak RSS by role and the analytic model's
    step time. A point that fails, or runs longer than ``point_timeout`` seconds, is a
    RuntimeError saying why."""
    [r] = run_points(config, overrides, [PointPlan(point, time_scale, steps, warmup)],
                     compute_ms=compute_ms, mpiexec_args=mpiexec_args,
                     host_bytes_per_s=host_bytes_per_s, point_timeout=point_timeout,
                     interrupt=interrupt)
    if "error" in r:
        raise RuntimeError(r["error"])
    return r


def logged_steps(metrics: list[dict]) -> int:
    """The last global step in a run's metrics records (0 before the first)."""
    return max((m["step"] for m in metrics), default=0)


def timeout_message(seconds: float, logged: int, steps: int) -> str:
    """Why a point that ran past ``--point-timeout`` was ended."""
    return f"timed out after {seconds:g} s ({logged} of {steps} steps logged)"


def peak_by_role(peak_mb: dict[str, float], num_ps: int,
                 num_ranks: int | None = None) -> dict[str, float]:
    """The largest peak RSS (MB) among the chief (rank 0), the parameter servers (ranks
    1..P) and the other workers, from peaks keyed ``rankR`` (only ranks below ``num_ranks``
    when given: a job's ranks that sat the point out are left out)."""
    roles: dict[str, float] = {}
    for key, mb in peak_mb.items():
        if key.startswith("rank") and (num_ranks is None or int(key[4:]) < num_ranks):
            rank = int(key[4:])
            role = "chief" if rank == 0 else "ps" if rank <= num_ps else "worker"
            roles[role] = max(roles.get(role, 0.0), mb)
    return roles


def num_nodes(config: str, overrides: list[str], grid: list[ScalePoint]) -> int:
    """Emulated nodes the grid needs: one per rank of its largest point."""
    return max(required_world_size(load_config(config, [*overrides, *p.overrides(),
                                                        "eval.rank=false",
                                                        f"dist.ps={p.ps}"]), p.workers)
               for p in grid)


def grid_net(config: str, overrides: list[str], grid: list[ScalePoint],
             of: Callable[[Config], _T]) -> Callable[[ScalePoint], _T]:
    """``of`` the network at each point of ``grid`` (:func:`num_params_of`,
    :func:`buckets_of`: they depend on FC only), each FC's config loaded once."""
    values = {p.hidden: of(load_config(config, [*overrides, *p.overrides()]))
              for p in {p.hidden: p for p in grid}.values()}
    return lambda point: values[point.hidden]


def point_label(point: ScalePoint) -> str:
    """W, P, FC, backups, stragglers and link of a point, for progress lines."""
    extra = (f" R={point.replicas}" if point.replicas else "") + (
        f" {point.slow_workers} slow x{point.slow_factor:g}" if point.slow_workers else "")
    servers = ("collective" + (" overlapped" if point.overlap else "")
               if point.aggregation == "collective" else f"P={point.ps}")
    return (f"W={point.workers} {servers} FC={point.hidden}{extra} "
            f"link {point.link_gbit} Gb/s")


def select_points(grid: list[ScalePoint], workers: tuple[int, ...] = (),
                  servers: tuple[int, ...] = ()) -> list[ScalePoint]:
    """The points of ``grid`` with one of the worker counts ``workers`` and one of the
    parameter-server counts ``servers`` (either empty: any), in grid order. A count no point
    of the grid has is a :class:`UserError` naming the counts it has."""
    for option, wanted, have in (("--workers", workers, {p.workers for p in grid}),
                                 ("--ps", servers, {p.ps for p in grid})):
        missing = [n for n in wanted if n not in have]
        if missing:
            raise UserError(f"{option} {','.join(map(str, missing))}: the grid has no such "
                            f"point (its counts: {','.join(map(str, sorted(have)))})")
    return [p for p in grid if (not workers or p.workers in workers)
            and (not servers or p.ps in servers)]


def run_scale(config: str, overrides: list[str], quick: bool, compute_ms: float | None,
              time_scale: float, aggregation: str = "ps", workers: tuple[int, ...] = (),
              servers: tuple[int, ...] = (), point_timeout: float = POINT_TIMEOUT_S,
              progress: Callable[[str], None] = lambda text: print(text, file=sys.stderr,
                                                                   flush=True),
              partial: Callable[[dict], None] = lambda results: None) -> dict:
    """Every point of the grid on the emulated cluster (started with as many nodes as the
    largest point has ranks, reshaped per link rate, stopped at the end); the results as
    one JSON-able dict, also handed to ``partial`` after each point. A point that fails, or
    runs longer than ``point_timeout`` seconds, is recorded with its error and the grid goes
    on. SIGINT or SIGTERM ends the running point's processes and raises
    :class:`~dba3c.errors.Interrupted` (the points so far went to ``partial``).
    ``aggregation`` collective measures :func:`collective_grid` instead; ``workers`` and
    ``servers`` keep only the points with those counts of workers and parameter servers
    (:func:`select_points`)."""
    from dba3c.benchmarks.node import machine_description

    grid = select_points(collective_grid(quick) if aggregation == "collective"
                         else scale_grid(quick), workers, servers)
    overlap = overlaps(load_config(config, overrides))  # dist.collective_overlap, in effect
    grid = [replace(p, overlap=overlap) if p.aggregation == "collective" else p for p in grid]
    require_emulation()  # before anything is printed or started
    source = "--compute-ms" if compute_ms else COMPUTE_MS_SOURCE
    compute_ms = compute_ms or DEFAULT_COMPUTE_MS
    results: dict[str, Any]  # JSON
    results = {"config": config, "overrides": list(overrides), "quick": quick,
               "aggregation": aggregation, "collective_algorithm": load_config(
                   config, overrides).dist.collective_algorithm,
               "date": date.today().isoformat(), "machine": machine_description(),
               "compute_ms": compute_ms, "compute_ms_source": source, "time_scale": time_scale,
               "links": "emulated cluster: one rank per network namespace, htb-shaped veth "
                        "links at rate / s both ways, MPI over TCP",
               "points": []}
    nodes, t0 = num_nodes(config, overrides, grid), time.monotonic()
    scales = grid_time_scales(grid, time_scale, grid_net(config, overrides, grid, num_params_of),
                              compute_ms / 1000, grid_net(config, overrides, grid, buckets_of))
    plans = [PointPlan(p, s, *steps_for(p, quick)) for p, s in zip(grid, scales, strict=True)]
    first_rate = link_rate(grid[0].link_gbit, plans[0].time_scale)
    progress(f"bench --scale: starting the emulated cluster ({nodes} nodes, links "
             f"{first_rate}); T_c = {compute_ms:.1f} ms ({results['compute_ms_source']})")
    with Interrupt() as interrupt, EmulatedCluster(nodes, first_rate) as emulated:
        interrupt.check()
        mpiexec_args = emulated.mpiexec_args()
        results["host_bytes_per_s"] = host = emulated.host_bytes_per_s()
        progress(f"bench --scale: MPI over unshaped links moves {host / 1e6:.0f} MB/s on this "
                 f"host (in the model: a second limit on the transfers, / s)")

        def record(plan: PointPlan, r: dict) -> None:
            results["points"].append(r)
            partial(results)
            if "error" in r:
                done = f"FAILED: {r['error'][-300:]}"
            else:
                cpu = "?" if r["cpu_busy"] is None else f"{100 * r['cpu_busy']:.0f}%"
                done = (f"step {r['step_ms']:.1f} ms (model {r['model_step_ms']:.1f}, with "
                        f"the host {r['emulated_model_step_ms']:.1f}), E "
                        f"{r['efficiency']:.2f}, CPU {cpu}")
            progress(f"bench --scale {len(results['points'])}/{len(grid)} "
                     f"[{time.monotonic() - t0:.0f} s] {point_label(plan.point)}, "
                     f"s={plan.time_scale:g} ({emulated.rate}): {done}")

        for group in job_groups(plans):
            rate = link_rate(group[0].point.link_gbit, group[0].time_scale)
            if rate != emulated.rate:
                emulated.reshape(rate)
            todo: list[PointPlan] = group
            while todo:  # a job that fails in a point leaves the rest to a new one
                interrupt.check()
                ran = run_points(config, overrides, todo, compute_ms=compute_ms,
                                 mpiexec_args=mpiexec_args, host_bytes_per_s=host,
                                 point_timeout=point_timeout, interrupt=interrupt,
                                 done=record)
                todo = todo[len(ran):]
    return results


def scale_table(r: dict, command: str) -> str:
    """The results as a dated markdown section for docs/benchmarks.md (emulated results,
    labelled so, with the model's step time beside each measured one)."""
    rows = []
    for p in r["points"]:
        backup = f"{p['replicas']}/{p['workers']}" if p["replicas"] else "all"
        slow = (f"{p['slow_workers']} x{p['slow_factor']:g}" if p["slow_workers"] else "none")
        servers = (("coll. overlapped" if p.get("overlap") else "coll.")
                   if p.get("aggregation") == "collective" else p["ps"])
        head = (f"| {p['link_gbit']} | {p['time_scale']:g} | {p['workers']} | {servers} | "
                f"{p['hidden']} | {backup} | {slow} |")
        if "error" in p:
            rows.append(f"{head} failed | | | | | | | |")
            continue
        cpu = "?" if p["cpu_busy"] is None else f"{100 * p['cpu_busy']:.0f}%"
        rss = max(p["peak_rss_mb"].values(), default=0.0)
        models = " | ".join(f"{p[key]:.1f} ({p[key] / p['step_ms'] - 1:+.0%})"
                            for key in ("model_step_ms", "emulated_model_step_ms"))
        rows.append(f"{head} {p['step_ms']:.1f} | {models} | {p['efficiency']:.2f} | "
                    f"{p['data_points_per_s']:.0f} | {cpu} | {rss:.0f} |")
    return "\n".join([
        (f"## `dba3c bench --scale{' --quick' if r['quick'] else ''}"
         f"{' --aggregation collective' if r.get('aggregation') == 'collective' else ''}` "
         f"on {r['date']} "
         f"(emulated cluster)"), "",
        f"Command: `{command}`  ", (f"Machine: {r['machine']}; config `{r['config']}` "
                                    f"{' '.join(r['overrides'])}"), "",
        (f"EMULATED: synthetic-compute ranks, T_c = {r['compute_ms']:.1f} ms "
         f"({r['compute_ms_source']}); {r['links']}. Time scale s per row: links at rate / s, "
         f"each worker waits T_c x s per step; step time = steady step time / s (steps after "
         f"the warm-up); E = T_c / T_step; model: docs/benchmarks.md's analytic step time "
         f"of a real cluster, and the same with the emulating host's cores as a second "
         f"limit on the transfers (every vector through this host's TCP stack at "
         f"{r['host_bytes_per_s'] / 1e6:.0f} MB/s, the unshaped MPI ping-pong rate, / s); "
         f"their difference from the measurement in brackets. CPU: the whole machine's use "
         f"in the steady window."
         + (f" Collectives: dist.collective_algorithm={r['collective_algorithm']}."
            if r["aggregation"] == "collective" else "")), "",
        ("| link, Gb/s | s | W | P | FC | gradients per step | stragglers | step, ms | model, "
         "ms | model, host-limited, ms | E | data points/s | CPU | peak RSS of a rank, MB |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rows, ""]) + "\n"


def scale_command(config: str, overrides: list[str], quick: bool, compute_ms: float | None,
                  time_scale: float, out_json: Path, docs: Path,
                  aggregation: str = "ps", workers: tuple[int, ...] = (),
                  servers: tuple[int, ...] = (), point_timeout: float = POINT_TIMEOUT_S) -> str:
    """Run the grid, write ``out_json`` and append the markdown section to ``docs``; return
    the section. While it runs, the points so far are in ``NAME.partial.json`` beside
    ``out_json``; an interrupt (SIGINT, SIGTERM) leaves them there and raises
    :class:`~dba3c.errors.Interrupted` saying how many and where."""
    from dba3c.benchmarks.node import _command_line, _record

    partial_json = out_json.with_suffix(".partial.json")
    kept: list[dict] = []

    def partial(results: dict) -> None:  # a grid cut short keeps the points it measured
        out_json.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(partial_json, (json.dumps(results, indent=1) + "\n").encode())
        kept[:] = results["points"]

    try:
        results = run_scale(config, overrides, quick, compute_ms, time_scale, aggregation,
                            workers, servers, point_timeout, partial=partial)
    except Interrupted as e:
        where = partial_json if kept else "nowhere (none was measured)"
        raise Interrupted(e.signum, f"{len(kept)} points measured kept in {where}") from None
    partial_json.unlink(missing_ok=True)
    options = (" --scale" + (" --quick" if quick else "")
               + (f" --compute-ms {compute_ms:g}" if compute_ms else "")
               + f" --time-scale {time_scale:g}"
               + (" --aggregation collective" if aggregation == "collective" else "")
               + (f" --workers {','.join(map(str, workers))}" if workers else "")
               + (f" --ps {','.join(map(str, servers))}" if servers else "")
               + (f" --point-timeout {point_timeout:g}"
                  if point_timeout != POINT_TIMEOUT_S else ""))
    table = scale_table(results, _command_line(options, config, overrides))
    _record(results, table, out_json, docs)
    return table
