"""The analytic step time of ``dba3c bench scale``'s points, a pure function of the point
(docs/benchmarks.md, "Analytic model of the synchronous step time").

Notation (times in seconds of the real, unscaled cluster; a step is global step t to t + 1):

  W, P, R     workers, parameter servers, gradients a step waits for (R = W without backups)
  N           parameters; M = 4 N x ``WIRE_PER_PAYLOAD``: bytes of one float32 vector on a
              link, TCP/IP headers included (:func:`wire_bytes`); the parameters travel so
              from parameter servers
  G           bytes of one gradient on a link: M, or M / 2 in bfloat16 (``dist.wire_dtype``,
              a point's ``wire_dtype``; :func:`wire_bytes` of its ``ELEMENT_BYTES``); in
              collective aggregation the parameters' changes travel in the same type, so
              its allgather moves G as well
  B           a link's bytes per second, ``link_gbit`` x 1e9 / 8
  s           the time scale of an emulated measurement (links at B / s, compute T_c x s)
  T_c         a worker's compute per step
  T_a         Adam on a shard: ``ADAM_S_PER_PARAM`` x N / P (ps) or N / W (collective); it
              runs in real time, so an emulated step shows T_a / s
  T_round     a collective's message round: ``ROUND_POLL_CAPS`` x poll cap
              (``dist.collective_poll_us``); rho(W) rounds per phase (:func:`phase_rounds`)
  H           the emulating host's MPI bytes per second (``host_bytes_per_s``)

ps aggregation (:func:`comm_seconds`, :func:`straggler_seconds`):

  T_comm = max(R G / P, G) / B + max(W M / P, M) / B
  T_step = T_c + T_comm + T_strag + T_a / s

collective aggregation, serial (reduce-scatter of the gradient then allgather of the
parameters' changes, the whole vector each; f the slowest rank's compute factor,
``slow_factor`` with stragglers, else 1):

  T_comm = (W - 1) / W x 2 G / B
  T_step = f T_c + T_comm + 2 rho(W) T_round + T_a / s

the emulating host as a second limit on the transfers (:func:`host_seconds`; ps: W
gradients and W parameter vectors per step, collective: W - 1 of each):

  T_comm <- max(T_comm, step bytes / (H s))

collective aggregation, overlapped: the steady period of a discrete-event timeline of one
rank over the network's K buckets b = 0 .. K - 1, one per layer (:func:`net_buckets`,
:func:`overlap_stages`, :func:`overlapped_step_starts`, :func:`overlapped_step_seconds`).
With F_b stage b's forward FLOPs and D the sum of every stage's forward and backward FLOPs,
stage b computes F_b / D x f T_c forward and 2 F_b / D x f T_c backward (F_0 / D for b = 0);
bucket b's reduce-scatter and allgather each hold the link, one collective at a time in the
order posted, for

  T_rs_b = (W - 1) / W x G_b / B + rho(W) T_round      (G_b: bucket b's gradient bytes)
  T_ag_b = (W - 1) / W x G_b / B + rho(W) T_round      (its parameters' changes)

and T_a / s runs after bucket 0's reduce-scatter; with H, B <- min(B, H s / W)
(:func:`collective_rate`). One bucket gives the serial model. A replicated bucket 0
(``dist.replicate_first_bucket``) is one allreduce by recursive doubling instead, rho(W)
rounds that each move the whole bucket's gradient, and nothing to gather:

  T_rs_0 = rho(W) (G_0 / B + T_round),  T_ag_0 = 0

Gathered ahead (``dist.gather_ahead``): the last bucket's allgather is posted as soon as its
reduce-scatter ends, not after bucket 0's and the tail, and takes its turn on the link by
that time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dba3c.config import DistConfig
from dba3c.distributed.synthetic import stage_seconds
from dba3c.learning.params import layer_buckets

if TYPE_CHECKING:
    from dba3c.learning.models import NetSpec

# A TCP segment on a veth link (MTU 1500) carries at most 1448 payload bytes and costs
# 14 (Ethernet) + 20 (IPv4) + 32 (TCP with timestamps) more on the wire
WIRE_PER_PAYLOAD = (1448 + 14 + 20 + 32) / 1448
ADAM_S_PER_PARAM = 10e-9  # docs/benchmarks.md: Adam on N/P floats takes N/P x 10 ns
# One message round of a collective step costs about 1.4 poll caps (dist.collective_poll_us):
# fitted on the emulated cluster, MPICH's algorithm against recursive halving/doubling at
# W = 16 (docs/benchmarks.md, "Collective aggregation"; docs/decisions.md, "Waiting,
# collectives and the emulated cluster"). A real network adds its own latency per round.
ROUND_POLL_CAPS = 1.4
# Bytes of one gradient element on the wire, per dist.wire_dtype (dba3c/distributed/wire.py);
# parameters always travel in float32
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2}


class Point(Protocol):
    """What the model reads of a grid point (:class:`~dba3c.benchmarks.scale.grid.ScalePoint`,
    whose module imports this one): W, P, R (0 = W), the number of stragglers and their
    compute factor, the link in Gb/s, the aggregation (ps or collective), whether the
    collectives overlap compute and the gradients' type on the wire (``dist.wire_dtype``)."""

    @property
    def workers(self) -> int: ...
    @property
    def ps(self) -> int: ...
    @property
    def replicas(self) -> int: ...
    @property
    def slow_workers(self) -> int: ...
    @property
    def slow_factor(self) -> float: ...
    @property
    def link_gbit(self) -> int: ...
    @property
    def aggregation(self) -> str: ...
    @property
    def overlap(self) -> bool: ...
    @property
    def wire_dtype(self) -> str: ...


def wire_bytes(num_params: int, dtype: str = "float32") -> float:
    """The bytes of one vector of ``num_params`` in ``dtype`` (float32 or bfloat16) on a
    link, TCP/IP headers included."""
    return ELEMENT_BYTES[dtype] * num_params * WIRE_PER_PAYLOAD


def step_bytes(point: Point, num_params: int) -> float:
    """The bytes one step moves over all links, TCP/IP headers included (ps: a gradient in
    and a float32 parameter vector out per worker; collective: W - 1 gradients and W - 1
    vectors of the parameters' changes over all nodes, both in the wire's type)."""
    if point.aggregation == "collective":
        return (point.workers - 1) * 2 * wire_bytes(num_params, point.wire_dtype)
    return point.workers * (wire_bytes(num_params, point.wire_dtype) + wire_bytes(num_params))


def model_step_seconds(point: Point, num_params: int, compute_s: float,
                       time_scale: float, host_bytes_per_s: float | None = None,
                       algorithm: str = DistConfig.collective_algorithm,
                       poll_s: float = DistConfig().collective_poll_s,
                       buckets: Sequence[Bucket] = (), staged_cost: float = 0.0,
                       replicated_first: bool = False, ahead: bool = False) -> float:
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
    the serial model), every rank computing at the slowest rank's pace and paying
    ``staged_cost`` x its compute for the staging (``dist.overlap_cost``), bucket 0
    allreduced where ``replicated_first`` (``dist.replicate_first_bucket``), the last
    bucket gathered ``ahead`` (``dist.gather_ahead``)."""
    if point.aggregation == "collective" and point.overlap:
        slowest = point.slow_factor if point.slow_workers else 1.0
        stages = overlap_stages(buckets or (Bucket(num_params, 1),), point.workers,
                                compute_s * slowest * (1.0 + staged_cost),
                                collective_rate(point, host_bytes_per_s, time_scale),
                                algorithm, poll_s, replicated_first, point.wire_dtype)
        return overlapped_step_seconds(
            stages, ADAM_S_PER_PARAM * num_params / point.workers / time_scale, ahead)
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


@dataclass(frozen=True)
class Stage:
    """One stage of an overlapped collective step (seconds): its forward and backward
    compute, and the time its bucket's reduce-scatter and allgather each hold the link."""

    forward_s: float
    backward_s: float
    reduce_scatter_s: float
    allgather_s: float


def overlap_stages(buckets: Sequence[Bucket], workers: int, compute_s: float,
                   rate_bytes_per_s: float, algorithm: str, poll_s: float,
                   replicated_first: bool = False, wire_dtype: str = "float32") -> list[Stage]:
    """The stages of a step of ``compute_s`` = T_c over ``workers`` = W ranks. Compute in
    proportion to FLOPs: stage b runs F_b / D x T_c forward and 2 F_b / D x T_c backward
    (F_0 / D for stage 0, which computes no input gradient), D = the sum of all of them.
    Bucket b's reduce-scatter and allgather each hold the link for the time their bytes
    take, (W - 1)/W x ``wire_bytes``(N_b) / rate in ``wire_dtype`` (the gradient's and the
    parameters' changes' type on the wire; summed over the buckets, the serial model's
    :func:`comm_seconds`), plus their message rounds,
    :func:`phase_rounds` x ``ROUND_POLL_CAPS`` x ``poll_s``. ``replicated_first``: bucket
    0's allreduce holds the link for log2 W rounds (recursive doubling) of its whole
    gradient's bytes and allgathers nothing."""
    forward, backward = stage_seconds(compute_s, [b.flops for b in buckets])
    round_s = ROUND_POLL_CAPS * poll_s
    rounds_s = phase_rounds(workers, algorithm) * round_s
    share = (workers - 1) / workers
    stages: list[Stage] = []
    for bucket, forward_s, backward_s in zip(buckets, forward, backward, strict=True):
        if replicated_first and not stages:
            doubling = phase_rounds(workers, "recursive")
            allreduce_s = doubling * (wire_bytes(bucket.params, wire_dtype) / rate_bytes_per_s
                                      + round_s)
            stages.append(Stage(forward_s, backward_s, allreduce_s, 0.0))
            continue
        phase_s = share * wire_bytes(bucket.params, wire_dtype) / rate_bytes_per_s + rounds_s
        stages.append(Stage(forward_s, backward_s, phase_s, phase_s))
    return stages


def collective_rate(point: Point, host_bytes_per_s: float | None,
                    time_scale: float) -> float:
    """Bytes per second through a collective node's link: ``link_gbit``; with
    ``host_bytes_per_s`` = H at most H s / W, the emulating host moving every node's bytes
    (:func:`host_seconds`: W - 1 gradients and parameter vectors per step, W times a node's
    (W - 1)/W of each)."""
    rate = point.link_gbit * 1e9 / 8
    if host_bytes_per_s:
        rate = min(rate, host_bytes_per_s * time_scale / point.workers)
    return rate


def overlapped_step_starts(stages: Sequence[Stage], tail_s: float, steps: int,
                           ahead: bool = False) -> list[float]:
    """When each of ``steps`` steps starts its forward pass (stage 0), on one rank of a
    collective step that overlaps communication with compute, from a start with every
    parameter in place and the link idle. The discrete-event timeline of a step:

    - forward: stage b = 0, 1, ..., B - 1 runs ``forward_s`` once stage b - 1 is done and
      bucket b's allgather of the step before has completed;
    - backward: stage b = B - 1, ..., 0 runs ``backward_s``; as each ends, bucket b's
      reduce-scatter is posted;
    - after the last reduce-scatter (bucket 0), ``tail_s`` (Adam on the rank's shard; the
      control allreduce runs beside bucket 0's reduce-scatter, as the serial step posts it
      beside the whole vector's); then the allgathers of buckets 0, 1, ..., B - 1 are posted;
    - ``ahead``: the last bucket's allgather is posted as its reduce-scatter ends instead
      (the end of the collectives on the link before it, its own included).

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
    and the starts are evenly spaced (:func:`overlapped_step_seconds`); gathered ahead,
    the last bucket's allgather has its place in that state too."""
    last = len(stages) - 1
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
        posted_ahead: float | None = None  # when the last bucket's allgather was posted
        for b in reversed(range(len(stages))):
            compute_free += stages[b].backward_s
            if posted_ahead is not None and posted_ahead <= compute_free:  # its turn first
                link_free = max(link_free, posted_ahead) + stages[last].allgather_s
                ready[last], posted_ahead = link_free, None
            link_free = max(link_free, compute_free) + stages[b].reduce_scatter_s
            if ahead and b == last:
                posted_ahead = link_free
        if posted_ahead is not None:  # posted before the tail and the other allgathers
            link_free = max(link_free, posted_ahead) + stages[last].allgather_s
            ready[last] = link_free
        link_free += tail_s
        for b, stage in enumerate(stages):
            if not (ahead and b == last):
                link_free += stage.allgather_s
                ready[b] = link_free
    return starts


def overlapped_step_seconds(stages: Sequence[Stage], tail_s: float,
                            ahead: bool = False) -> float:
    """The steady step period of :func:`overlapped_step_starts`: the second and third
    steps' starts apart (every step from the second on is the same). It is at least the
    compute cycle T_c + reduce-scatter_0 + tail + allgather_0 (bucket 0's parameters come
    back only after its gradient left) and the link cycle, every collective + tail + the
    last stage's forward and backward (its gradient leaves after its parameters came): the
    first when the other collectives hide behind compute, the second when the link waits
    for nothing but the last stage. With one bucket both are the serial model, T_c + both
    collectives + tail. Gathered ``ahead``, the last bucket's allgather leaves the compute
    cycle's end: it follows its reduce-scatter, during the rest of the backward pass."""
    _, second, third = overlapped_step_starts(stages, tail_s, 3, ahead)
    return third - second


def straggler_seconds(point: Point, num_params: int, compute_s: float) -> float:
    """ps mode: how much later the parameter servers' links have taken the gradients a
    step waits for when stragglers (``slow_factor`` x T_c) are among them. The others'
    gradients come in from T_c; a straggler's comes at ``slow_factor`` x T_c and waits
    behind them while the link is still busy, so the link's busy time hides that much of
    the straggler's extra compute. Backup workers (R of W) leave out up to W - R of them."""
    waited = point.replicas or point.workers
    num_slow = max(0, point.slow_workers - (point.workers - waited))
    if not num_slow:
        return 0.0
    shard, vector = link_seconds(point, num_params, point.wire_dtype)
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


def link_seconds(point: Point, num_params: int,
                 dtype: str = "float32") -> tuple[float, float]:
    """(one parameter server's shard, a whole vector) in ``dtype`` through one link of
    ``link_gbit``: the vector's bytes with TCP/IP headers (:func:`wire_bytes`), a shard
    1 / P of them."""
    vector = wire_bytes(num_params, dtype) / (point.link_gbit * 1e9 / 8)
    return vector / max(point.ps, 1), vector


def comm_seconds(point: Point, num_params: int) -> float:
    """A step's transfer time when every worker computes T_c. ps: each PS link takes the R
    gradient shards a step waits for (R = W without backup workers), then sends W parameter
    shards, one after the other; neither direction takes less than a whole vector through a
    worker's own link. collective: the ring reduce-scatter moves (W - 1)/W G and the
    allgather (W - 1)/W G through every node's link, whatever W (MPI's own algorithms for
    these sizes move the same bytes per node). Gradients travel in ``point.wire_dtype``,
    and so do the parameters' changes in collective aggregation; a parameter server sends
    float32 parameters."""
    grad_shard, grad = link_seconds(point, num_params, point.wire_dtype)
    if point.aggregation == "collective":
        return (point.workers - 1) / point.workers * 2 * grad
    shard, vector = link_seconds(point, num_params)
    waited = point.replicas or point.workers
    return max(waited * grad_shard, grad) + max(point.workers * shard, vector)


def host_seconds(point: Point, num_params: int, host_bytes_per_s: float,
                 time_scale: float) -> float:
    """How long the emulating host needs for a step's transfers (seconds, unscaled): every
    byte of a step (:func:`step_bytes`, TCP/IP headers included) goes through its TCP stack
    and MPI on its few cores at ``host_bytes_per_s``, in real time, so divided by the time
    scale. A real cluster spreads that work over its nodes."""
    return step_bytes(point, num_params) / host_bytes_per_s / time_scale
