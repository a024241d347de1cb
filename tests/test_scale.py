"""``dba3c bench --scale``: the grid, the arithmetic of its measurements, and real
(small) synthetic runs whose step time must follow the compute time and the stragglers."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import uuid
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from dba3c.benchmarks.emulated import emulation_problem, link_rate
from dba3c.benchmarks.scale.cluster import (
    HOST_BUDGET,
    Bucket,
    PointPlan,
    ScalePoint,
    Stage,
    busy_fraction,
    collective_grid,
    collective_rounds,
    comm_seconds,
    cpu_times,
    grid_time_scales,
    host_seconds,
    logged_steps,
    model_step_seconds,
    net_buckets,
    overlap_stages,
    overlapped_step_seconds,
    overlapped_step_starts,
    peak_by_role,
    point_time_scale,
    run_point,
    scale_grid,
    scale_table,
    select_points,
    steady_step_seconds,
    steps_for,
    timeout_message,
)
from dba3c.errors import UserError
from dba3c.learning.models import NetSpec

from conftest import dba3c

PAPER_NET = NetSpec("ba3c", 128, (4, 84, 84), 6)  # FC 128, 84x84x4, 6 actions


def test_grids_cover_the_issue_points_once():
    grid = scale_grid(quick=False)
    assert len(grid) == len(set(grid))
    full = [p for p in grid if p.link_gbit == 10]
    assert {(p.workers, p.ps) for p in full if p.hidden == 128 and not p.replicas
            and not p.slow_workers} >= {(w, p) for w in (1, 2, 4, 8, 16, 32, 64)
                                        for p in (1, 2, 4, 8)}
    assert {p.hidden for p in full if (p.workers, p.ps) == (64, 4)} == {32, 128, 256, 512}
    assert {p.ps for p in full if p.workers == 64 and p.hidden == 128} == set(range(1, 9))
    backups = [(p.replicas, p.slow_workers) for p in full if p.replicas]
    assert backups == [(60, 0), (60, 4)]
    fast = [p for p in grid if p.link_gbit == 100]
    assert {(p.workers, p.ps, p.hidden) for p in fast} == {
        (w, p, 128) for w in (1, 2, 4, 8, 16, 32, 64) for p in (1, 4)}
    assert grid == full + fast  # grouped by link rate: one reshape of the links
    quick = scale_grid(quick=True)
    assert max(p.workers for p in quick) == 16 and len(quick) == 13
    assert [(p.workers, p.link_gbit) for p in quick[-2:]] == [(4, 100), (16, 100)]


def test_fewer_steps_at_large_w_and_a_slower_clock_for_fast_links():
    assert steps_for(ScalePoint(16, 4), quick=False) == (12, 4)
    assert steps_for(ScalePoint(32, 4), quick=False) == (10, 3)
    assert steps_for(ScalePoint(64, 4), quick=True) == (10, 3)
    assert point_time_scale(ScalePoint(4, 4), 10) == 10
    assert point_time_scale(ScalePoint(4, 4, link_gbit=100), 10) == 50
    # 10 Gb/s / 10 and 100 Gb/s / 50, in the tc units local-cluster.sh takes
    assert link_rate(10, 10) == "1000mbit" and link_rate(100, 50) == "2000mbit"
    assert link_rate(10, 3) == "3333mbit"
    with pytest.raises(ValueError, match="below 1 Mbit/s"):
        link_rate(0.001, 10)


def test_the_clock_slows_per_w_and_link_until_the_host_moves_at_most_its_budget():
    n, tc = 322_695, 0.0128  # the paper network at FC 128
    wire = 4 * n * 1514 / 1448  # one vector with TCP/IP headers
    grid = [ScalePoint(4, 1), ScalePoint(64, 1), ScalePoint(64, 8),
            ScalePoint(64, 1, link_gbit=100)]
    scales = grid_time_scales(grid, 10, lambda point: n, tc)
    # W = 4, P = 1 at s = 10: 8 vectors in a step of tc + 2 x 4 vectors / 1.25 GB/s
    assert 8 * wire / ((tc + 8 * wire / 1.25e9) * 10) < HOST_BUDGET and scales[0] == 10
    # W = 64, P = 8 needs k = 4 (128 vectors per 30.1 ms step at s = 10 is 3.8 budgets),
    # and W = 64, P = 1 (151 ms) shares it
    step_p8 = tc + 2 * 64 * wire / 8 / 1.25e9 + 10e-9 * n / 8 / 10
    assert 3 < 128 * wire / (step_p8 * 10) / HOST_BUDGET <= 4
    assert scales[1:3] == [40, 40]
    # 100 Gb/s: s = 50, and W = 64 at P = 1 (26.7 ms) moves 0.86 budgets there
    step_fast = tc + 2 * 64 * wire / 12.5e9 + 10e-9 * n / 50
    assert 128 * wire / (step_fast * 50) < HOST_BUDGET and scales[3] == 50
    # collective W = 64: 126 vectors per step of tc + 2 x 63/64 vectors / 1.25 GB/s + 12
    # rounds of 1.4 x 50 us (15.8 ms) is 7.2 budgets at s = 10
    collective = ScalePoint(64, 0, aggregation="collective")
    step_c = tc + 2 * 63 / 64 * wire / 1.25e9 + 12 * 70e-6 + 10e-9 * n / 64 / 10
    assert 7 < 126 * wire / (step_c * 10) / HOST_BUDGET <= 8
    assert grid_time_scales([collective], 10, lambda point: n, tc) == [80]
    # overlapped, the same bytes in 13.7 ms (test_model_overlapped_collective_for_the_issue_
    # points): 8.3 budgets
    overlapped = ScalePoint(64, 0, aggregation="collective", overlap=True)
    step_o = tc + 2 * (63 / 64 * 4 * 3200 * 1514 / 1448 / 1.25e9 + 6 * 70e-6) + 10e-9 * n / 640
    assert 8 < 126 * wire / (step_o * 10) / HOST_BUDGET <= 9
    assert grid_time_scales([overlapped], 10, lambda point: n, tc,
                            lambda point: net_buckets(PAPER_NET)) == [90]


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


def collective(workers: int, **kw) -> ScalePoint:
    """A point of ``--aggregation collective``."""
    return ScalePoint(workers, 0, aggregation="collective", **kw)


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


@pytest.mark.parametrize("point, host", [
    (collective(64), None), (collective(2), None), (collective(64, link_gbit=100), None),
    (collective(16, slow_workers=1, slow_factor=3.0), None), (collective(64), 0.2e9)])
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


def test_the_collective_grid_has_no_parameter_servers():
    grid = collective_grid(quick=False)
    assert len(grid) == len(set(grid))
    assert all(p.aggregation == "collective" and p.ps == 0 for p in grid)
    assert "dist.aggregation=collective" in grid[0].overrides()
    assert [p.workers for p in grid if p.link_gbit == 10 and p.hidden == 128
            and not p.slow_workers] == [2, 4, 8, 16, 32, 64]
    assert {p.hidden for p in grid if p.workers == 64} == {32, 128, 256, 512}
    assert max(p.workers for p in collective_grid(quick=True)) == 16


def test_workers_and_ps_select_grid_points_by_their_counts():
    grid = collective_grid(quick=False)
    top = select_points(grid, (32, 64))
    assert top == [p for p in grid if p.workers in (32, 64)]  # grid order kept
    assert {p.workers for p in top} == {32, 64} and len(top) == 8  # 2 + 2 at 100 Gb/s + 4 at 64
    assert select_points(grid) == grid
    with pytest.raises(UserError, match=r"--workers 3,5: the grid has no such point \(its "
                       r"counts: 2,4,8,16,32,64\)"):
        select_points(grid, (3, 4, 5))
    ps_grid = scale_grid(quick=False)
    chosen = select_points(ps_grid, (64,), (5, 8))
    assert chosen == [p for p in ps_grid if p.workers == 64 and p.ps in (5, 8)]
    assert {(p.ps, p.link_gbit) for p in chosen} == {(5, 10), (8, 10)}
    with pytest.raises(UserError, match=r"--ps 4: the grid has no such point \(its counts: 0\)"):
        select_points(grid, (), (4,))


@pytest.mark.parametrize("argv, message", [
    (["--scale", "--workers", "4,x"], "argument --workers: '4,x' is not a comma-separated "
                                      "list of positive counts (e.g. 32,64)"),
    (["--scale", "--ps", "0"], "argument --ps: '0' is not a comma-separated "
                               "list of positive counts (e.g. 32,64)"),
    (["--workers", "64"], "--workers is a --scale option (give --scale)"),
    (["--ps", "4"], "--ps is a --scale option (give --scale)"),
    (["--scale", "--quick", "--workers", "64"], "--workers 64: the grid has no such point "
                                                "(its counts: 1,4,16)"),
])
def test_bench_point_filters_refuse_bad_counts_before_any_work(argv, message, tmp_path, capsys):
    from dba3c.cli import main

    docs = tmp_path / "benchmarks.md"
    rc = main(["bench", *argv, "--out", str(tmp_path / "bench" / "results.json"),
               "--docs", str(docs)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"error: {message}"), err
    assert err.count("\n") == 1 and not docs.exists() and not (tmp_path / "bench").exists()


def test_the_emulated_cluster_needs_root(monkeypatch):
    from dba3c.benchmarks import emulated

    assert emulation_problem() is None  # the tests run as root where namespaces work
    monkeypatch.setattr(emulated.os, "geteuid", lambda: 1000)
    assert emulation_problem() == "uid 1000 is not root (network namespaces need root)"


def test_bench_scale_refuses_without_root_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from dba3c.benchmarks import emulated
    from dba3c.cli import main

    monkeypatch.setattr(emulated.os, "geteuid", lambda: 1000)
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n")
    rc = main(["bench", "--scale", "--quick", "--out", str(tmp_path / "bench" / "results.json"),
               "--docs", str(docs)])
    err = capsys.readouterr().err
    assert rc == 2 and err == ("error: the emulated cluster cannot start here: uid 1000 is not "
                               "root (network namespaces need root)\n"), err
    assert docs.read_text() == "# Benchmarks\n" and not (tmp_path / "bench").exists()


def test_bench_scale_says_where_it_wrote(tmp_path, monkeypatch, capsys):
    from dba3c.benchmarks.scale import cluster as scale
    from dba3c.cli import main

    written = []

    def fake_scale_command(config, overrides, quick, compute_ms, time_scale, out_json, docs,
                           *rest):
        written.append((out_json, docs))
        return "| table |\n"

    monkeypatch.setattr(scale, "scale_command", fake_scale_command)
    docs = tmp_path / "benchmarks.md"
    rc = main(["bench", "--scale", "--quick", "--out", str(tmp_path / "b" / "x.json"),
               "--docs", str(docs)])
    out, err = capsys.readouterr()
    # --scale writes scale.json in --out's directory, whatever --out's file name is
    assert rc == 0 and written == [(tmp_path / "b" / "scale.json", docs)], written
    assert out == "| table |\n"
    assert err == f"bench: results in {tmp_path / 'b' / 'scale.json'}; section appended to " \
                  f"{docs}\n", err


def test_steady_step_time_is_the_median_of_one_and_two_step_spans_after_the_warmup():
    metrics = [{"step": s, "time_s": t} for s, t in
               [(1, 5.0), (2, 5.5), (3, 5.6), (4, 5.8), (5, 6.0), (6, 6.2)]]
    assert steady_step_seconds(metrics, warmup=2) == pytest.approx(0.2)
    # two steps logged together (intervals 0.4 and 0.01): the steady 0.2 s, where the slope
    # between the window's ends would give (6.61 - 5.6) / 4 = 0.2525
    bunched = [*metrics[:3], {"step": 4, "time_s": 5.8}, {"step": 5, "time_s": 6.2},
               {"step": 6, "time_s": 6.21}, {"step": 7, "time_s": 6.41},
               {"step": 8, "time_s": 6.61}]
    assert steady_step_seconds(bunched, warmup=2) == pytest.approx(0.2)
    # a pair at the end of a short window (make test, T_c = 20 ms): the median slope between
    # all pairs gave 18.1 ms, under the compute time
    short = [{"step": s, "time_s": t} for s, t in
             [(4, 1.0), (5, 1.02), (6, 1.041), (7, 1.0415), (8, 1.0615)]]
    assert steady_step_seconds(short, warmup=3) == pytest.approx(0.02)
    # every other step logged with the next (a chief that trains learns of step 2k + 1 only
    # when it next waits): intervals 1.37, 0.01, ... whose median is half a step
    alternating = [{"step": s, "time_s": 10 + 0.685 * (s + s % 2) + 0.01 * (s % 2 == 0)}
                   for s in range(5, 15)]
    assert steady_step_seconds(alternating, warmup=4) == pytest.approx(0.685, rel=0.02)
    # a gap in the records counts per step (the last record, the run's end, is left out)
    assert steady_step_seconds([{"step": 3, "time_s": 1.0}, {"step": 6, "time_s": 1.9},
                                {"step": 7, "time_s": 1.905}], warmup=2) == pytest.approx(0.3)
    # the final step logged 7 ms after the one before, plus one bunched pair, in a 0.11 s
    # steady run (measured in make test): with the last record the median was 0.06
    ending = [{"step": s, "time_s": t} for s, t in
              [(3, 1.0), (4, 1.11), (5, 1.22), (6, 1.23), (7, 1.44), (8, 1.447)]]
    assert steady_step_seconds(ending, warmup=3) == pytest.approx(0.11)
    with pytest.raises(ValueError, match="need at least 2"):
        steady_step_seconds(metrics, warmup=5)


def test_a_point_plans_enough_steps_for_late_steps_at_its_windows_start():
    # make test, 2026-11-26 (s = 5, 105 ms a step, 1 worker, 2 PS): steps 4 and 5 logged one
    # step late. Records 4-7 (3 warm-up steps, 8 in all) give half a step: no span leads into
    # the late steps, all three spans out of them are short
    run = [(1, 0.119), (2, 0.229), (3, 0.337), (4, 0.548), (5, 0.653), (6, 0.655),
           (7, 0.762), (8, 0.873), (9, 0.978), (10, 1.083), (11, 1.188), (12, 1.191)]
    metrics = [{"step": s, "time_s": t} for s, t in run]
    assert steady_step_seconds(metrics[:8], warmup=3) == pytest.approx(0.0545)
    # the same run to step 12: records 4-11, 13 spans of which those three are the only short
    assert steady_step_seconds(metrics, warmup=3) == pytest.approx(0.105)
    with pytest.raises(ValueError, match="leave 4 records .* need at least 6"):
        PointPlan(ScalePoint(1, 2), 5.0, 8, 3)
    assert PointPlan(ScalePoint(1, 2), 5.0, 10, 3).steps == 10


def test_cpu_use_counts_idle_and_iowait_as_not_busy():
    assert cpu_times("cpu  10 2 8 70 10 0 0 0 0 0") == (20, 100)
    samples = [(3, 100, 1000), (6, 150, 1100), (9, 250, 1300), (12, 300, 1400)]
    assert busy_fraction(samples, warmup=5) == pytest.approx(150 / 300)
    assert busy_fraction(samples[:2], warmup=5) is None


def test_peak_rss_is_grouped_by_role():
    peaks = {"process": 500.0, "rank0": 110.0, "rank1": 90.0, "rank2": 95.0, "rank3": 80.0,
             "rank4": 85.0}
    assert peak_by_role(peaks, num_ps=2) == {"chief": 110.0, "ps": 95.0, "worker": 85.0}


def test_table_lists_every_point_with_its_settings():
    point = {"workers": 16, "ps": 4, "hidden": 128, "replicas": 15, "slow_workers": 1,
             "slow_factor": 2.0, "link_gbit": 10, "time_scale": 10, "step_ms": 20.5,
             "model_step_ms": 18.45, "emulated_model_step_ms": 22.55, "efficiency": 0.65,
             "data_points_per_s": 23414.6, "cpu_busy": 0.4,
             "peak_rss_mb": {"chief": 110.2, "ps": 95.0, "worker": 90.0}}
    failed = {"workers": 64, "ps": 8, "hidden": 128, "replicas": 0, "slow_workers": 0,
              "slow_factor": 2.0, "link_gbit": 100, "time_scale": 50, "error": "rank 3 died"}
    r = {"quick": True, "date": "2026-11-23", "machine": "test CPU", "config": "c.yaml",
         "overrides": [], "compute_ms": 12.8, "compute_ms_source": "assumed", "time_scale": 10,
         "links": "emulated links", "host_bytes_per_s": 1.2e9, "points": [point, failed],
         "aggregation": "ps", "collective_algorithm": "recursive"}
    table = scale_table(r, "dba3c bench --scale --quick")
    assert ("| 10 | 10 | 16 | 4 | 128 | 15/16 | 1 x2 | 20.5 | 18.4 (-10%) | 22.6 (+10%) | "
            "0.65 | 23415 | 40% | 110 |") in table
    assert "this host's TCP stack at 1200 MB/s" in table
    assert "| 100 | 50 | 64 | 8 | 128 | all | none | failed |" in table
    assert "EMULATED: synthetic-compute ranks, T_c = 12.8 ms (assumed); emulated links" in table
    assert "Collectives:" not in table
    collective = scale_table({**r, "aggregation": "collective"}, "dba3c bench --scale")
    assert "in the steady window. Collectives: dist.collective_algorithm=recursive." in collective
    overlapped = {**point, "ps": 0, "aggregation": "collective", "overlap": True}
    assert "| 10 | 10 | 16 | coll. overlapped | 128 |" in scale_table(
        {**r, "aggregation": "collective", "points": [overlapped]}, "dba3c bench --scale")


@pytest.mark.parametrize("point, floor", [(ScalePoint(2, 1), 1.0),
                                          (ScalePoint(2, 1, slow_workers=1, slow_factor=3.0),
                                           3.0),
                                          (collective(2, slow_workers=1, slow_factor=3.0),
                                           3.0)])
def test_a_small_run_steps_no_faster_than_its_slowest_worker(point, floor):
    # T_c 20 ms x s 5 = 100 ms per step (300 ms for a straggler, whom every step waits for)
    r = run_point("configs/breakout.yaml", [], point, compute_ms=20.0, time_scale=5.0,
                  steps=12, warmup=4)
    assert floor * 20.0 <= r["step_ms"] < floor * 20.0 + 40.0, r
    assert r["efficiency"] == pytest.approx(20.0 / r["step_ms"])
    assert r["data_points_per_s"] == pytest.approx(2 * 32 / (r["step_ms"] / 1000))
    assert r["cpu_busy"] is None or 0.0 <= r["cpu_busy"] <= 1.0
    assert set(r["peak_rss_mb"]) == {"chief", "worker"} | ({"ps"} if point.ps else set())
    assert all(20 < mb <= 150 for mb in r["peak_rss_mb"].values()), r["peak_rss_mb"]


def test_bad_scale_options_are_refused():
    for args, expected in [(["--scale", "--long", "5"], "--scale and --long"),
                           (["--scale", "--compute-ms", "0"], "--compute-ms 0 must be"),
                           (["--scale", "--time-scale", "0.5"], "--time-scale 0.5 must be"),
                           (["--scale", "--point-timeout", "0"], "--point-timeout 0 must be a "
                                                                 "positive number of seconds"),
                           (["--scale", "--point-timeout", "nan"], "--point-timeout nan must"),
                           (["--point-timeout", "5"], "--point-timeout is a --scale option")]:
        proc = dba3c("bench", *args, check=False, timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and \
            expected in proc.stderr, proc.stderr


def test_scale_command_writes_every_point_to_json_and_appends_the_table(tmp_path, monkeypatch):
    from dba3c.benchmarks.scale import cluster as scale

    calls = []

    class Cluster:  # records what the bench asks of the emulated cluster
        def __init__(self, nodes, rate):
            calls.append(("start", nodes, rate))
            self.rate = rate

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls.append(("stop",))

        def reshape(self, rate):
            calls.append(("reshape", rate))
            self.rate = rate

        def mpiexec_args(self):
            return ["-hosts", "node1"]

        def host_bytes_per_s(self):
            return 1.5e9

    def measured(config, overrides, plans, *, compute_ms, mpiexec_args, host_bytes_per_s,
                 point_timeout, interrupt, done):
        # what a job would return: here a step of T_c + 1 ms per worker; W = 4, P = 1 and
        # W = 16 at 100 Gb/s fail (the job stops there)
        calls.append(("job", len(plans)))
        results = []
        for plan in plans:
            point, time_scale = plan.point, plan.time_scale
            calls.append(("run", point.workers, point.link_gbit, time_scale, mpiexec_args,
                          host_bytes_per_s, point_timeout))
            if (tmp_path / "scale.partial.json").exists():  # the points so far, while it runs
                calls.append(("partial", len(json.loads(
                    (tmp_path / "scale.partial.json").read_text())["points"])))
            if (point.workers, point.ps, point.link_gbit) in ((16, 4, 100), (4, 1, 10)):
                results.append(scale.failed_point(plan, "rank 7 exited 1"))
                done(plan, results[-1])
                return results
            step_ms = compute_ms + point.workers
            results.append({**asdict(point), "time_scale": time_scale, "step_ms": step_ms,
                            "model_step_ms": step_ms, "emulated_model_step_ms": step_ms,
                            "efficiency": compute_ms / step_ms, "data_points_per_s": 1000.0,
                            "cpu_busy": 0.5, "peak_rss_mb": {"chief": 100.0}})
            done(plan, results[-1])
        return results

    monkeypatch.setattr(scale, "run_points", measured)
    monkeypatch.setattr(scale, "EmulatedCluster", Cluster)
    monkeypatch.setattr(scale, "require_emulation", lambda: None)
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n")
    table = scale.scale_command("configs/breakout.yaml", [], True, None, 10.0,
                                tmp_path / "scale.json", docs)
    results = json.loads((tmp_path / "scale.json").read_text())
    assert [(p["workers"], p["ps"]) for p in results["points"]][:6] == [
        (1, 1), (1, 4), (4, 1), (4, 4), (16, 1), (16, 4)]
    assert results["compute_ms"] == pytest.approx(77 * 2 / 12) and results["time_scale"] == 10
    assert "assumed" in results["compute_ms_source"]
    assert docs.read_text() == "# Benchmarks\n\n" + table
    assert "Command: `dba3c bench --scale --quick --time-scale 10`" in table
    # W = 16 runs at s = 30: its FC 512 point moves 2.1 budgets of the host at s = 10
    assert table.count("\n| 10 | 30 | 16 | 4 |") == 6  # FC 128, 32, 512, and 3 backup rows
    assert "| 100 | 50 | 16 | 4 | 128 | all | none | failed |" in table
    assert "| 10 | 10 | 4 | 1 | 128 | all | none | failed |" in table
    assert results["points"][-1]["error"] == "rank 7 exited 1"
    # one job per link rate and time scale; the first stopped at its third point, the rest
    # relaunched
    assert [c[1] for c in calls if c[0] == "job"] == [4, 1, 7, 2]
    # one cluster of 20 nodes (16 workers + 4 PS), links reshaped per job, stopped at the end
    assert calls[0] == ("start", 20, "1000mbit") and calls[-1] == ("stop",)
    assert [c for c in calls if c[0] == "reshape"] == [("reshape", "333mbit"),
                                                         ("reshape", "2000mbit")]
    assert [c[1] for c in calls if c[0] == "partial"] == list(range(1, 13))
    assert not (tmp_path / "scale.partial.json").exists()
    runs = [c for c in calls if c[0] == "run"]
    assert len(runs) == 13 and all(c[4:] == (["-hosts", "node1"], 1.5e9, 300.0) for c in runs)
    assert results["host_bytes_per_s"] == 1.5e9
    assert [c[3] for c in runs] == [10] * 4 + [30] * 7 + [50] * 2


def test_a_timed_out_point_says_how_far_it_got():
    assert logged_steps([]) == 0
    assert logged_steps([{"step": 1}, {"step": 2}, {"step": 4}]) == 4
    assert timeout_message(300.0, 4, 12) == "timed out after 300 s (4 of 12 steps logged)"
    assert timeout_message(7.5, 0, 10) == "timed out after 7.5 s (0 of 10 steps logged)"


def marked_processes(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (what a test gave its children)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_a_point_past_its_time_limit_is_ended_with_its_ranks(monkeypatch):
    # 1 s per step (T_c 20 ms x s 50) for 40 steps, ended after 8 s: a few steps logged
    marker = f"DBA3C_TEST_{uuid.uuid4().hex}"
    monkeypatch.setenv(marker, "1")
    with pytest.raises(RuntimeError) as failed:
        run_point("configs/breakout.yaml", [], ScalePoint(2, 1), compute_ms=20.0,
                  time_scale=50.0, steps=40, warmup=3, point_timeout=8.0)
    found = re.fullmatch(r"timed out after 8 s \((\d+) of 40 steps logged\)", str(failed.value))
    # at most 8 steps by the limit (counted from the point's start line), and while the
    # tree ends (3 s of grace) the chief may log up to 3 more
    assert found and int(found[1]) <= 11, failed.value
    assert marked_processes(marker) == []


def test_an_interrupt_ends_the_running_point_and_keeps_the_points_so_far(tmp_path, monkeypatch,
                                                                         capsys):
    from dba3c.benchmarks import proctree
    from dba3c.benchmarks.scale import cluster as scale
    from dba3c.cli import main

    trees = []

    def measured(config, overrides, plans, *, compute_ms, mpiexec_args, host_bytes_per_s,
                 point_timeout, interrupt, done):
        # two points measure; the third runs a real process tree until SIGTERM comes
        for plan in plans:
            if len(trees) == 2:
                tree = proctree.ProcessTree(["sh", "-c", "trap '' TERM; sleep 100 & sleep 100"])
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
                assert tree.wait(interrupt) == proctree.INTERRUPTED
                trees.append(tree)
                interrupt.check()
            trees.append(None)
            done(plan, {**asdict(plan.point), "time_scale": plan.time_scale, "step_ms": 20.0,
                        "model_step_ms": 20.0, "emulated_model_step_ms": 20.0,
                        "efficiency": 0.6, "data_points_per_s": 1000.0, "cpu_busy": 0.5,
                        "peak_rss_mb": {"chief": 1.0}})
        return []

    class Cluster:
        rate = "1000mbit"

        def __init__(self, nodes, rate):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            trees.append("stopped")

        def mpiexec_args(self):
            return []

        def host_bytes_per_s(self):
            return 1e9

    monkeypatch.setattr(scale, "run_points", measured)
    monkeypatch.setattr(scale, "EmulatedCluster", Cluster)
    monkeypatch.setattr(scale, "require_emulation", lambda: None)
    before = signal.getsignal(signal.SIGTERM)
    docs = tmp_path / "benchmarks.md"
    rc = main(["bench", "--scale", "--quick", "--out", str(tmp_path / "b" / "results.json"),
               "--docs", str(docs)])
    err = capsys.readouterr().err
    partial = tmp_path / "b" / "scale.partial.json"
    assert rc == 143, err
    assert err.endswith(f"\nerror: interrupted; 2 points measured kept in {partial}\n"), err
    assert "Traceback" not in err and not docs.exists()
    assert [(p["workers"], p["ps"]) for p in json.loads(partial.read_text())["points"]] == [
        (1, 1), (1, 4)]
    assert trees[-1] == "stopped" and not trees[2].pids()  # the cluster stopped, tree ended
    assert signal.getsignal(signal.SIGTERM) is before
