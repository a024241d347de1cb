"""The analytic model of ``dba3c bench scale`` (``dba3c.benchmarks.scale.model``): step
times of the ps and collective aggregations by hand, the buckets of a network, and the
overlapped step's timeline."""

from __future__ import annotations

from dataclasses import asdict
from itertools import pairwise

import numpy as np
import pytest

from dba3c.benchmarks.scale.grid import ScalePoint
from dba3c.benchmarks.scale.model import (
    Bucket,
    Stage,
    collective_rounds,
    comm_seconds,
    host_seconds,
    model_step_seconds,
    net_buckets,
    overlap_stages,
    overlapped_step_seconds,
    overlapped_step_starts,
    step_bytes,
)
from dba3c.learning.models import NetSpec
from tests.support.scale import PAPER_NET, collective


def test_model_step_time_adds_both_ways_of_the_ps_link_and_hides_stragglers_behind_it():
    n, tc = 322_695, 0.0128  # the paper network at FC 128
    wire = 4 * n * 1514 / 1448  # one vector with TCP/IP headers
    # W = 64, P = 4 over 10 Gb/s: 2 x 64 x M/4 through 1.25e9 B/s, Adam on n/4 floats / s
    expected = tc + 2 * 64 * wire / 4 / 1.25e9 + n / 4 * 10e-9 / 10
    assert model_step_seconds(ScalePoint(64, 4), n, tc, 10) == pytest.approx(expected)
    # ms: 12.8 + 34.6
    assert model_step_seconds(ScalePoint(64, 4), n, tc, 10) == pytest.approx(0.0474, abs=1e-4)
    # one worker, 8 servers: its own link carries the whole vector each way
    assert model_step_seconds(ScalePoint(1, 8, link_gbit=100), n, tc, 50) == pytest.approx(
        tc + 2 * wire / 12.5e9 + n / 8 * 10e-9 / 50)
    # W = 64, P = 4: a shard takes x = 0.27 ms through a PS link, a vector y = 1.08 ms
    x, y, adam = wire / 4 / 1.25e9, wire / 1.25e9, n / 4 * 10e-9 / 10
    base = model_step_seconds(ScalePoint(64, 4), n, tc, 10)
    # backup workers: the PS links take 60 gradient shards, then send 64 parameter shards
    backup = ScalePoint(64, 4, replicas=60)
    assert model_step_seconds(backup, n, tc, 10) == pytest.approx(tc + 124 * x + adam)
    # 4 stragglers at 2 x T_c come in at 25.6 ms, while the links still take the other 60
    # gradients (until 12.8 + 16.2 = 29.0 ms): the stragglers cost only the link time
    slow = ScalePoint(64, 4, slow_workers=4, slow_factor=2.0)
    assert tc + 60 * x > 2 * tc + y
    assert model_step_seconds(slow, n, tc, 10) == pytest.approx(base)
    # at 4 x T_c (51.2 ms) they come in after the link went idle: 51.2 + 1.08 + 64 x
    slower = ScalePoint(64, 4, slow_workers=4, slow_factor=4.0)
    assert model_step_seconds(slower, n, tc, 10) == pytest.approx(4 * tc + y + 64 * x + adam)
    # backup workers leave 4 of them out; a 5th is waited for (59 on time + 1 late)
    left_out = ScalePoint(64, 4, replicas=60, slow_workers=4, slow_factor=4.0)
    assert model_step_seconds(left_out, n, tc, 10) == pytest.approx(
        model_step_seconds(backup, n, tc, 10))
    one_late = ScalePoint(64, 4, replicas=60, slow_workers=5, slow_factor=4.0)
    assert model_step_seconds(one_late, n, tc, 10) == pytest.approx(4 * tc + y + 64 * x + adam)
    # the emulating host's cores: 2 x 64 vectors through 1.2 GB/s of this host, / s = 10
    assert host_seconds(ScalePoint(64, 4), n, 1.2e9, 10) == pytest.approx(
        2 * 64 * wire / 1.2e9 / 10)
    assert host_seconds(ScalePoint(64, 4), n, 1.2e9, 10) == pytest.approx(0.0144, abs=1e-4)
    # a limit beside the links', not an addition: 14 ms < the 4 links' 34.6 ms changes
    # nothing; at P = 8 (17.3 ms) 0.2 GB/s of host (72 ms) is the limit
    assert model_step_seconds(ScalePoint(64, 4), n, tc, 10, 1.2e9) == pytest.approx(base)
    assert model_step_seconds(ScalePoint(64, 8), n, tc, 10, 0.2e9) == pytest.approx(
        tc + 2 * 64 * wire / 0.2e9 / 10 + n / 8 * 10e-9 / 10)


def test_model_collective_moves_2_w_minus_1_over_w_vectors_per_node_whatever_w():
    n, tc = 322_695, 0.0128
    wire = 4 * n * 1514 / 1448
    # W = 64 over 10 Gb/s: reduce-scatter + allgather move 2 x 63/64 M through each link,
    # in 2 x 6 rounds (recursive halving / doubling) of 1.4 poll caps (50 us by default),
    # Adam runs on n/64 floats
    expected = tc + 2 * 63 / 64 * wire / 1.25e9 + 12 * 70e-6 + n / 64 * 10e-9 / 10
    assert model_step_seconds(collective(64), n, tc, 10) == pytest.approx(expected)
    # efficiency T_c / T_step: 0.81 at 10 Gb/s, 0.92 at 100 Gb/s (ps at P = 4: 0.27)
    assert tc / expected == pytest.approx(0.810, abs=0.002)
    assert tc / model_step_seconds(collective(64, link_gbit=100), n, tc, 50) == \
        pytest.approx(0.924, abs=0.002)
    # 20 us caps: 28 us per round (0.84 at 10 Gb/s, 0.96 at 100 Gb/s)
    assert model_step_seconds(collective(64), n, tc, 10, poll_s=20e-6) == pytest.approx(
        expected - 12 * 42e-6)
    assert tc / model_step_seconds(collective(64, link_gbit=100), n, tc, 50,
                                   poll_s=20e-6) == pytest.approx(0.959, abs=0.002)
    # MPICH's own choice (pairwise exchange, ring): 2 x 63 rounds
    assert model_step_seconds(collective(64), n, tc, 10, algorithm="mpi") == pytest.approx(
        expected + (126 - 12) * 70e-6)
    assert [collective_rounds(w, "recursive") for w in (1, 2, 3, 16, 64)] == [0, 2, 4, 8, 12]
    assert [collective_rounds(w, "mpi") for w in (1, 2, 3, 16, 64)] == [0, 2, 4, 30, 126]
    # about 2 M per node whatever W: one rank moves nothing, 64 ranks 63/32 of 2 ranks
    assert comm_seconds(collective(1), n) == 0
    assert comm_seconds(collective(64), n) / comm_seconds(collective(2), n) == \
        pytest.approx(63 / 32)
    # a PS link at P = 4 carries 2 x 64 M / 4 = 32 M, 16 x 64/63 a collective link's bytes
    assert comm_seconds(ScalePoint(64, 4), n) / comm_seconds(collective(64), n) == \
        pytest.approx(16 * 64 / 63)
    # the emulating host carries 2 (W - 1) vectors a step, all nodes together
    assert host_seconds(collective(64), n, 1.2e9, 10) == pytest.approx(
        2 * 63 * wire / 1.2e9 / 10)


def test_bfloat16_halves_gradients_and_collective_changes_and_ps_parameters_stay_float32():
    n, tc = 322_695, 0.0128
    wire = 4 * n * 1514 / 1448  # the parameters, float32, with TCP/IP headers
    grad = 2 * n * 1514 / 1448  # a gradient in bfloat16
    adam_ps, adam_coll = n / 4 * 10e-9 / 10, n / 64 * 10e-9 / 10
    ps, coll = ScalePoint(64, 4, wire_dtype="bfloat16"), collective(64, wire_dtype="bfloat16")
    # ps, W = 64, P = 4 over 10 Gb/s: each PS link takes 64 gradient shards, sends 64
    # parameter shards
    assert model_step_seconds(ps, n, tc, 10) == pytest.approx(
        tc + 64 * grad / 4 / 1.25e9 + 64 * wire / 4 / 1.25e9 + adam_ps)
    # 4 stragglers at 4 x T_c come in after the links went idle: 4 T_c, their own gradient
    # through a worker's link, then 64 parameter shards
    slower = ScalePoint(64, 4, slow_workers=4, slow_factor=4.0, wire_dtype="bfloat16")
    assert model_step_seconds(slower, n, tc, 10) == pytest.approx(
        4 * tc + grad / 1.25e9 + 64 * wire / 4 / 1.25e9 + adam_ps)
    # collective, W = 64, serial: 63/64 of a gradient and of the parameters' changes per
    # node, both in bfloat16
    assert model_step_seconds(coll, n, tc, 10) == pytest.approx(
        tc + 63 / 64 * 2 * grad / 1.25e9 + 12 * 70e-6 + adam_coll)
    # all nodes' bytes per step: ps W of each, collective W - 1 of each
    assert step_bytes(ps, n) == pytest.approx(64 * (grad + wire))
    assert step_bytes(coll, n) == pytest.approx(63 * 2 * grad)
    assert step_bytes(collective(64), n) == pytest.approx(63 * 2 * wire)
    assert host_seconds(coll, n, 1.2e9, 10) == pytest.approx(63 * 2 * grad / 1.2e9 / 10)
    # overlapped: a bucket's reduce-scatter and allgather move 2-byte elements; a
    # replicated bucket 0's allreduce too
    first, second = overlap_stages((Bucket(1000, 2), Bucket(3000, 3)), 4, 0.013, 1.25e9,
                                   "recursive", 50e-6, replicated_first=True,
                                   wire_dtype="bfloat16")
    assert first == pytest.approx(
        Stage(0.002, 0.002, 2 * (2 * 1000 * 1514 / 1448 / 1.25e9 + 70e-6), 0.0))
    assert second == pytest.approx(
        Stage(0.003, 0.006, 3 / 4 * 2 * 3000 * 1514 / 1448 / 1.25e9 + 2 * 70e-6,
              3 / 4 * 2 * 3000 * 1514 / 1448 / 1.25e9 + 2 * 70e-6))


def test_the_paper_network_has_a_bucket_per_layer_with_its_stage_flops():
    # bucket starts (0, 3200, 28800, 80000, 116864) of 322,695
    # (dba3c.learning.params.layer_buckets);
    # forward FLOPs 2 x k^2 x C_in x output elements: conv 5x5x4 -> 80x80x32, then
    # 5x5x32 -> 36x36x32, 5x5x32 -> 14x14x64, 3x3x64 -> 5x5x64, FC 1600 -> 128 + both heads
    assert net_buckets(PAPER_NET) == (
        Bucket(3200, 2 * 25 * 4 * 80 * 80 * 32), Bucket(25600, 2 * 25 * 32 * 36 * 36 * 32),
        Bucket(51200, 2 * 25 * 32 * 14 * 14 * 64), Bucket(36864, 2 * 9 * 64 * 5 * 5 * 64),
        Bucket(205831, 2 * 1600 * 128 + 2 * 128 * 7))
    assert sum(b.flops for b in net_buckets(PAPER_NET)) == PAPER_NET.flops_per_state()
    # an MLP of 4 inputs, 8 hidden, 2 actions: 4x8+8 | 8x8+8 and heads 8x2+2, 8x1+1
    mlp = NetSpec("mlp", 8, (4,), 2)
    assert net_buckets(mlp) == (Bucket(40, 2 * 4 * 8), Bucket(72 + 27, 2 * 8 * 8 + 2 * 8 * 3))


def test_stages_share_t_c_by_flops_and_hold_the_link_for_bytes_and_rounds():
    # F = (2, 3): forward 2, 3; backward 2 (stage 0 has no input gradient), 6; D = 13
    stages = overlap_stages((Bucket(1000, 2), Bucket(3000, 3)), 4, 0.013, 1.25e9, "recursive",
                            50e-6)
    # W = 4: 3/4 of the bucket's wire bytes, 2 rounds of 1.4 x 50 us
    link = [3 / 4 * 4 * n * 1514 / 1448 / 1.25e9 + 2 * 70e-6 for n in (1000, 3000)]
    assert stages == [pytest.approx(Stage(0.002, 0.002, link[0], link[0])),
                      pytest.approx(Stage(0.003, 0.006, link[1], link[1]))]
    # MPICH's algorithm: W - 1 = 3 rounds each
    [mpi] = overlap_stages((Bucket(1000, 1),), 4, 0.013, 1.25e9, "mpi", 50e-6)
    assert mpi.allgather_s == pytest.approx(link[0] + 70e-6)
    # bucket 0 replicated: an allreduce of 2 rounds, each the whole bucket and a round's wait
    first, second = overlap_stages((Bucket(1000, 2), Bucket(3000, 3)), 4, 0.013, 1.25e9,
                                   "recursive", 50e-6, replicated_first=True)
    allreduce = 2 * (4 * 1000 * 1514 / 1448 / 1.25e9 + 70e-6)
    assert first == pytest.approx(Stage(0.002, 0.002, allreduce, 0.0))
    assert second == stages[1]


@pytest.mark.parametrize("point, host", [
    (collective(64), None), (collective(2), None), (collective(64, link_gbit=100), None),
    (collective(16, slow_workers=1, slow_factor=3.0), None), (collective(64), 0.2e9),
    (collective(64, wire_dtype="bfloat16"), None), (collective(64, wire_dtype="bfloat16"), 0.2e9)])
@pytest.mark.parametrize("algorithm, poll_s", [("recursive", 50e-6), ("mpi", 20e-6)])
def test_one_bucket_overlaps_nothing_and_is_the_serial_model(point, host, algorithm, poll_s):
    n, tc = 322_695, 0.0128
    overlapped = ScalePoint(**{**asdict(point), "overlap": True})
    serial = model_step_seconds(point, n, tc, 10, host, algorithm, poll_s)
    for buckets in ((), (Bucket(n, 7),)):  # no buckets: the whole vector as one
        assert model_step_seconds(overlapped, n, tc, 10, host, algorithm, poll_s,
                                  buckets) == pytest.approx(serial, rel=1e-12)
    # the timeline of one stage: forward, backward, reduce-scatter, Adam, allgather
    assert overlapped_step_seconds([Stage(3.0, 4.0, 1.0, 2.0)], 0.5) == 10.5


def test_an_overlapped_point_computes_its_staging_cost_too():
    # one bucket (nothing hidden) with staged_cost 0.14: the serial model at T_c x 1.14
    n, tc, point = 322_695, 0.0128, collective(64)
    overlapped = ScalePoint(**{**asdict(point), "overlap": True})
    assert model_step_seconds(overlapped, n, tc, 10, staged_cost=0.14) == pytest.approx(
        model_step_seconds(point, n, tc * 1.14, 10), rel=1e-12)
    assert model_step_seconds(point, n, tc, 10, staged_cost=0.14) == model_step_seconds(
        point, n, tc, 10)  # a serial step stages nothing


def test_two_buckets_hide_all_but_bucket_0s_collectives():
    # ms. Stage 0: forward 2, backward 2; stage 1: forward 3, backward 6 (T_c = 13); bucket 1
    # reduce-scatter 1.5, allgather 1.5, bucket 0 0.5 and 0.7; Adam 0.1. A step starts at 0
    # as bucket 0's allgather ends; bucket 1's allgather 0-1.5 under stage 0's forward (0-2);
    # stage 1 forward 2-5, backward 5-11; bucket 1's reduce-scatter 11-12.5 under stage 0's
    # backward (11-13); bucket 0's reduce-scatter 13-13.5, Adam 13.5-13.6, allgather
    # 13.6-14.3: the period is T_c + 0.5 + 0.1 + 0.7
    hidden = [Stage(2.0, 2.0, 0.5, 0.7), Stage(3.0, 6.0, 1.5, 1.5)]
    assert overlapped_step_seconds(hidden, 0.1) == pytest.approx(14.3)
    # bucket 1's collectives 0.5 longer than stage 0's compute: each shows by its excess
    # (stage 1's forward waits 0.5 for its parameters, bucket 0's reduce-scatter 0.5 for the
    # link)
    longer = [Stage(2.0, 2.0, 0.5, 0.7), Stage(3.0, 6.0, 2.5, 2.5)]
    assert overlapped_step_seconds(longer, 0.1) == pytest.approx(14.3 + 0.5 + 0.5)


def test_the_last_bucket_gathered_ahead_hides_behind_the_backward_pass_or_queues():
    # ms, Adam 0.1. Stage 0: forward 2, backward 6, bucket 0's reduce-scatter 0.5, allgather
    # 0.7; stage 1: forward 3, backward 2, 2 and 2.5. As posted now, bucket 1's allgather
    # follows bucket 0's (the step's last exchange, 27.8-28.3 + 0.1 + 0.7) and stage 1's
    # forward waits 0.5 for it: 14.3 (T_c + 0.5 + 0.1 + 0.7) + 0.5. Gathered ahead it
    # travels as its reduce-scatter ends (23.3-25.8, under stage 0's backward, 21.3-27.3):
    # nothing waits, 14.3
    hides = [Stage(2.0, 6.0, 0.5, 0.7), Stage(3.0, 2.0, 2.0, 2.5)]
    assert overlapped_step_seconds(hides, 0.1) == pytest.approx(14.8)
    assert overlapped_step_seconds(hides, 0.1, ahead=True) == pytest.approx(14.3)
    # stage 0's backward (2) shorter than bucket 1's reduce-scatter (2.5): bucket 0's
    # reduce-scatter is posted first and bucket 1's allgather (2.5) then stands between it and
    # bucket 0's allgather: start 34.6, forwards to 39.6, backward of stage 1 to 45.6, its
    # reduce-scatter to 48.1, bucket 0's to 48.6, bucket 1's allgather to 51.1, Adam, bucket
    # 0's allgather to 51.9: 17.3 against 15.3
    queues = [Stage(2.0, 2.0, 0.5, 0.7), Stage(3.0, 6.0, 2.5, 2.5)]
    assert overlapped_step_seconds(queues, 0.1) == pytest.approx(15.3)
    assert overlapped_step_seconds(queues, 0.1, ahead=True) == pytest.approx(17.3)


def test_a_link_bound_step_is_every_collective_plus_adam_and_the_last_stage():
    # ms. Compute is short, the link busy; the link waits only for the last stage's forward
    # and backward (its gradient leaves after its parameters came): start 0; allgathers of
    # buckets 1, 2 at 0-2, 2-7; stage 2 forward 7-7.2, backward 7.2-7.5; reduce-scatters of
    # buckets 2, 1, 0 at 7.5-11.5, 11.5-14.5, 14.5-16.5; Adam 16.5-17; bucket 0's allgather
    # 17-18
    stages = [Stage(0.1, 0.1, 2.0, 1.0), Stage(0.1, 0.2, 3.0, 2.0), Stage(0.2, 0.3, 4.0, 5.0)]
    links = sum(s.reduce_scatter_s + s.allgather_s for s in stages)
    assert overlapped_step_seconds(stages, 0.5) == pytest.approx(links + 0.5 + 0.2 + 0.3)


def test_the_overlapped_step_is_periodic_from_the_second_step():
    # bucket 1's reduce-scatter delays bucket 0's by 0.5 ms at every step; the first step
    # starts with every parameter in place, the later ones wait 0.5 for bucket 1's allgather
    # (it ends 0.5 after stage 0's forward): 14.8, then 15.3 per step
    longer = [Stage(2.0, 2.0, 0.5, 0.7), Stage(3.0, 6.0, 2.5, 2.5)]
    starts = overlapped_step_starts(longer, 0.1, 8)
    periods = [b - a for a, b in zip(starts, starts[1:])]
    assert periods == pytest.approx([14.8] + [15.3] * 6)
    # the paper network at W = 64 over 1 Gb/s, longer than either cycle alone
    stages = overlap_stages(net_buckets(PAPER_NET), 64, 0.0128, 0.125e9, "recursive", 50e-6)
    starts = overlapped_step_starts(stages, 5e-6, 20)
    periods = [b - a for a, b in zip(starts, starts[1:])]
    assert periods[1:] == pytest.approx([overlapped_step_seconds(stages, 5e-6)] * 18,
                                        rel=1e-9)
    # at least both cycles: the compute one and the link one
    links = sum(s.reduce_scatter_s + s.allgather_s for s in stages)
    assert periods[-1] > 0.0128 + stages[0].reduce_scatter_s + stages[0].allgather_s
    assert periods[-1] > links + stages[-1].forward_s + stages[-1].backward_s


def test_a_faster_link_never_makes_an_overlapped_step_longer():
    n, tc = 322_695, 0.0128
    periods = [model_step_seconds(collective(64, link_gbit=g, overlap=True), n, tc, 10,
                                  buckets=net_buckets(PAPER_NET))
               for g in (1, 2, 5, 10, 25, 40, 100, 400)]
    assert periods == sorted(periods, reverse=True) and periods[0] > periods[-1]
    rng = np.random.default_rng(0)
    for _ in range(200):
        stages = [Stage(*rng.uniform(0, 3, 2), *rng.uniform(0, 3, 2))
                  for _ in range(rng.integers(1, 6))]
        by_speed = [overlapped_step_seconds(
            [Stage(s.forward_s, s.backward_s, s.reduce_scatter_s / speed,
                   s.allgather_s / speed) for s in stages], 0.1) for speed in (0.5, 1, 2, 4)]
        assert all(a >= b - 1e-12 for a, b in pairwise(by_speed))


def test_model_overlapped_collective_for_the_issue_points():
    # the paper network at W = 64, T_c = 12.8 ms, recursive halving / doubling: compute
    # hides every collective but bucket 0's (3200 parameters: 12.8 KB, 6 rounds each way),
    # so the step is T_c + 2 (63/64 x bucket 0 / B + 6 x 1.4 x poll) + Adam on n/64 / s
    n, tc = 322_695, 0.0128
    buckets = net_buckets(PAPER_NET)
    efficiency = {}
    for gbit, s in ((10, 10), (100, 50)):
        for poll_s in (50e-6, 20e-6):
            step = model_step_seconds(collective(64, link_gbit=gbit, overlap=True), n, tc, s,
                                      poll_s=poll_s, buckets=buckets)
            bucket_0 = 63 / 64 * 4 * 3200 * 1514 / 1448 / (gbit * 1e9 / 8)
            assert step == pytest.approx(tc + 2 * (bucket_0 + 6 * 1.4 * poll_s)
                                         + n / 64 * 10e-9 / s)
            efficiency[gbit, poll_s] = tc / step
    # serial: 0.81, 0.84 at 10 Gb/s, 0.92, 0.96 at 100 Gb/s
    assert efficiency == pytest.approx({(10, 50e-6): 0.937, (10, 20e-6): 0.972,
                                        (100, 50e-6): 0.938, (100, 20e-6): 0.974}, abs=0.001)
    # bucket 0 replicated: one allreduce of 6 rounds, each the whole 12.8 KB, and no allgather
    replicated = {}
    for gbit, s in ((10, 10), (100, 50)):
        step = model_step_seconds(collective(64, link_gbit=gbit, overlap=True), n, tc, s,
                                  buckets=buckets, replicated_first=True)
        bucket_0 = 4 * 3200 * 1514 / 1448 / (gbit * 1e9 / 8)
        assert step == pytest.approx(tc + 6 * (bucket_0 + 1.4 * 50e-6) + n / 64 * 10e-9 / s)
        replicated[gbit] = tc / step
    assert replicated == pytest.approx({10: 0.963, 100: 0.967}, abs=0.001)
