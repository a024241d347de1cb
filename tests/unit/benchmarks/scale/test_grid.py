"""The grids of ``dba3c bench scale`` (``dba3c.benchmarks.scale.grid``): the points, the
options that select them, each point's steps and time scale."""

from __future__ import annotations

import pytest

from dba3c.benchmarks.emulated import link_rate
from dba3c.benchmarks.scale.grid import (
    HOST_BUDGET,
    ScalePoint,
    Selection,
    collective_grid,
    grid_time_scales,
    point_time_scale,
    scale_grid,
    select_points,
    steps_for,
)
from dba3c.benchmarks.scale.model import net_buckets
from dba3c.errors import UserError
from tests.support.scale import PAPER_NET


def test_grids_cover_the_issue_points_once():
    grid = scale_grid(quick=False)
    assert len(grid) == len(set(grid))
    full = [p for p in grid if p.link_gbit == 10]
    assert {(p.workers, p.ps) for p in full if p.hidden == 128 and not p.replicas
            and not p.slow_workers} >= {(w, p) for w in (1, 2, 4, 8, 16, 32, 64)
                                        for p in (1, 2, 4, 8)}
    assert {p.hidden for p in full if (p.workers, p.ps) == (64, 4)} == {32, 128, 256, 512}
    assert {p.ps for p in full if p.workers == 64 and p.hidden == 128} == set(range(1, 9))
    assert [(p.ps, p.hidden) for p in full if p.workers == 128] == [(4, 128)]
    backups = [(p.replicas, p.slow_workers) for p in full if p.replicas]
    assert backups == [(60, 0), (60, 4)]
    fast = [p for p in grid if p.link_gbit == 100]
    assert {(p.workers, p.ps, p.hidden) for p in fast} == {
        (w, p, 128) for w in (1, 2, 4, 8, 16, 32, 64) for p in (1, 4)} | {(128, 4, 128)}
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


def test_the_collective_grid_has_no_parameter_servers():
    grid = collective_grid(quick=False)
    assert len(grid) == len(set(grid))
    assert all(p.aggregation == "collective" and p.ps == 0 for p in grid)
    assert "dist.aggregation=collective" in grid[0].overrides()
    assert [p.workers for p in grid if p.link_gbit == 10 and p.hidden == 128
            and not p.slow_workers] == [2, 4, 8, 16, 32, 64, 128]
    assert {p.hidden for p in grid if p.workers == 64} == {32, 128, 256, 512}
    assert {(p.hidden, p.link_gbit) for p in grid if p.workers == 128} == {(128, 10), (128, 100)}
    assert max(p.workers for p in collective_grid(quick=True)) == 16


def test_workers_ps_links_and_hidden_select_grid_points():
    grid = collective_grid(quick=False)
    top = select_points(grid, Selection(workers=(32, 64)))
    assert top == [p for p in grid if p.workers in (32, 64)]  # grid order kept
    assert {p.workers for p in top} == {32, 64} and len(top) == 8  # 2 + 2 at 100 Gb/s + 4 at 64
    assert select_points(grid) == grid
    with pytest.raises(UserError, match=r"--workers 3,5: the grid has no such point \(its "
                       r"values: 2,4,8,16,32,64,128\)"):
        select_points(grid, Selection(workers=(3, 4, 5)))
    ps_grid = scale_grid(quick=False)
    chosen = select_points(ps_grid, Selection(workers=(64,), servers=(5, 8)))
    assert chosen == [p for p in ps_grid if p.workers == 64 and p.ps in (5, 8)]
    assert {(p.ps, p.link_gbit) for p in chosen} == {(5, 10), (8, 10)}
    with pytest.raises(UserError, match=r"--ps 4: the grid has no such point \(its values: 0\)"):
        select_points(grid, Selection(servers=(4,)))
    # W = 64 at FC 128 over 10 Gb/s, with and without stragglers: not its FC sizes or 100 Gb/s
    selection = Selection(workers=(64,), links=(10,), hidden=(128,))
    assert selection.options() == " --workers 64 --links 10 --hidden 128"
    assert select_points(grid, selection) == [
        ScalePoint(64, 0, aggregation="collective"),
        ScalePoint(64, 0, slow_workers=4, aggregation="collective")]
    with pytest.raises(UserError, match=r"--links 40: .*\(its values: 10,100\)"):
        select_points(grid, Selection(links=(40,)))
