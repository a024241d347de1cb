"""``dba3c bench BENCH`` (dba3c.benchmarks.commands), in-process: each bench gets its own
options and runs its own measurement (replaced here by a stand-in that records its
arguments); another bench's option, or no bench at all, is one ``error:`` line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from dba3c.benchmarks import node, overlap_cost, precision, real_ranks, stages, waiting
from dba3c.benchmarks.scale import report
from dba3c.cli import main
from tests.support import ROOT

BREAKOUT = str(ROOT / "configs/breakout.yaml")


def recorder(calls: list, result: object):
    """A stand-in for a bench's measurement: records (args, kwargs), returns ``result``."""
    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return result
    return record


@pytest.mark.parametrize("bench, module, function, options, expected", [
    ("node", node, "bench_command", ["--quick"],
     (BREAKOUT, ["train.lr=1e-3"], True, Path("bench/results.json"), None)),
    ("precision", precision, "precision_command", ["--quick"],
     (BREAKOUT, ["train.lr=1e-3"], True, Path("bench/precision.json"), None)),
    ("profile", node, "profile_command", [],
     (BREAKOUT, ["train.lr=1e-3"], False, Path("bench/profile.json"), None)),
    ("long", node, "long_command", ["--seconds", "60", "--run-dir", "runs/x"],
     (BREAKOUT, ["train.lr=1e-3"], 60.0, Path("runs/x"), Path("bench/long.json"), None)),
])
def test_a_recorded_bench_runs_its_measurement_with_its_options(
        bench, module, function, options, expected, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(module, function, recorder(calls, ("| table |\n", None)))
    assert main(["bench", bench, "--config", BREAKOUT, *options, "train.lr=1e-3"]) == 0
    assert calls == [(expected, {})]
    out, err = capsys.readouterr()
    assert out == "| table |\n" and err == f"bench: results in {expected[-2]}\n"


def test_bench_scale_runs_the_grid_with_its_filters(monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(report, "scale_command", recorder(calls, ("| table |\n", None)))
    assert main(["bench", "scale", "--config", BREAKOUT, "--aggregation", "collective",
                 "--workers", "64,128", "--links", "10", "--time-scale", "200"]) == 0
    assert main(["bench", "scale", "--config", BREAKOUT, "--wire-dtype", "bfloat16"]) == 0
    (args, _), (bfloat16, _) = calls
    assert args[:7] == (BREAKOUT, [], False, None, 200.0, Path("bench/scale.json"), None)
    assert args[7] == "collective" and args[8].workers == (64, 128)
    assert args[8].links == (10,) and args[8].servers == () and args[9] == 300.0
    assert args[10] is None and bfloat16[10] == "bfloat16"  # None: the config's


def test_bench_real_ranks_compares_the_modes_it_is_given(monkeypatch):
    calls: list = []
    monkeypatch.setattr(real_ranks, "compare_modes", recorder(calls, 0))
    assert main(["bench", "real-ranks", "--ranks", "2", "--cores", "1", "--modes",
                 "off,on,auto", "--tcp"]) == 0
    assert calls == [(("configs/breakout_64.yaml",), {
        "ranks": 2, "cores": 1, "steps": 40, "repeats": 2, "modes": "off,on,auto",
        "tcp": True, "link": None, "namespaces": None, "work_dir": Path("runs/real_ranks"),
        "out": Path("bench/real_ranks.json")})]


def test_bench_overlap_cost_measures_one_rank_into_what_scale_reads(monkeypatch):
    calls: list = []
    monkeypatch.setattr(overlap_cost, "measure", recorder(calls, 0))
    assert main(["bench", "overlap-cost", "--steps", "120", "--probe-steps", "6"]) == 0
    assert calls == [(("configs/breakout_64.yaml", 120, 6, Path("runs/overlap_cost"),
                       Path("bench/overlap_cost.json")), {})]


def test_bench_waiting_measures_its_points_or_plays_one_rank_of_a_point(monkeypatch):
    points: list = []
    rank: list = []
    monkeypatch.setattr(waiting, "waiting_command", recorder(points, 0))
    monkeypatch.setattr(waiting, "rank_of_point", recorder(rank, 0))
    assert main(["bench", "waiting", "--ranks", "2,4", "--strategies", "block"]) == 0
    assert points == [(((2, 4), "block", None, 50, 20.0, None, "mpi", 0.0), {})] and not rank
    # what run_point starts under mpiexec
    assert main(["bench", "waiting", "--rank-of-point", "block", "--params", "10",
                 "--rounds", "3", "--late-ms", "1", "--timer-slack-ns", "1000"]) == 0
    assert rank == [(("block", 10, 3, 1.0, 1000, "mpi"), {})] and len(points) == 1


def test_bench_stages_times_the_stages_of_the_config(monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(stages, "measure", recorder(calls, {"figures": 1}))
    monkeypatch.setattr(stages, "stages_table", lambda r: f"| {r['figures']} |")
    assert main(["bench", "stages", "--config", BREAKOUT, "--calls", "3", "model.hidden=64"]) \
        == 0
    assert calls == [((BREAKOUT, ["model.hidden=64"], 3), {})]
    assert capsys.readouterr().out == "| 1 |\n"


BENCHES = "{node,precision,profile,long,scale,real-ranks,overlap-cost,waiting,stages}"
UNKNOWN = "unrecognized arguments: {} (see `dba3c --help`)"


@pytest.mark.parametrize("argv, message", [
    ([], f"the following arguments are required: {BENCHES} (see `dba3c bench --help`)"),
    (["nodes"], f"argument {BENCHES}: invalid choice: 'nodes' (choose from 'node', 'precision', "
                f"'profile', 'long', 'scale', 'real-ranks', 'overlap-cost', 'waiting', "
                f"'stages') (see `dba3c bench --help`)"),
    (["node", "--run-dir", "x"], UNKNOWN.format("--run-dir")),
    (["profile", "--seconds", "5"], UNKNOWN.format("--seconds")),
    (["long", "--quick"], UNKNOWN.format("--quick")),
    (["scale", "--ranks", "2"], UNKNOWN.format("--ranks")),
    (["real-ranks", "--log"], UNKNOWN.format("--log")),
    (["waiting", "--config", "configs/breakout.yaml"],
     UNKNOWN.format("--config configs/breakout.yaml")),
    (["waiting", "train.lr=1e-3"], UNKNOWN.format("train.lr=1e-3")),
    (["stages", "--quick", "--config", "configs/breakout.yaml"], UNKNOWN.format("--quick")),
])
def test_a_bench_refuses_what_is_not_its_option(argv, message, monkeypatch, capsys):
    for module, function in [(node, "bench_command"), (node, "profile_command"),
                             (node, "long_command"), (report, "scale_command"),
                             (real_ranks, "compare_modes"), (waiting, "waiting_command"),
                             (stages, "measure")]:
        monkeypatch.setattr(module, function, lambda *a, **k: pytest.fail("it ran"))
    assert main(["bench", *argv]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
