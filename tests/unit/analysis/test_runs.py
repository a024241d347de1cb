"""dba3c.analysis.runs: reading run directories, grouping seeds, totals and statistics over
seeds, on runs written by hand."""

from pathlib import Path

import pytest

from dba3c.analysis import runs as R
from tests.support.rundirs import write_run


def run_of(name="r", path="/runs/r", config=None, metrics=(), evals=()):
    return R.Run(name=name, path=Path(path), config=config or {}, metrics=list(metrics),
                 evals=list(evals), summary={})


def test_load_runs_reads_each_directory_once_and_names_clashes_by_parent(tmp_path):
    a = write_run(tmp_path / "x" / "seed0", metrics_times=[1.0], evals=[(1.0, 3.0)])
    b = write_run(tmp_path / "y" / "seed0", seed=1, metrics_times=[2.0])
    runs = R.load_runs([a, tmp_path / "x" / ".." / "x" / "seed0", b])
    assert [run.name for run in runs] == ["x/seed0", "y/seed0"]
    assert runs[0].path == a and runs[0].config["run"]["seed"] == 0
    assert [e["mean"] for e in runs[0].evals] == [3.0] and runs[1].evals == []
    with pytest.raises(ValueError, match=f"^{tmp_path}: not a run directory"):
        R.load_runs([tmp_path])


def test_learning_config_leaves_out_where_a_run_is_written_its_seed_and_its_end():
    config = {"run": {"dir": "a", "seed": 3, "log_every": 5},
              "env": {"id": "pong", "nice": 10},
              "train": {"lr": 1e-3, "max_seconds": 60, "max_steps": 100},
              "eval": {"stop_at_target": True, "target_score": 20, "probe_frames": 800,
                       "stop_if_dead": True}}
    assert R.learning_config(config) == {"env.id": "pong", "train.lr": 1e-3,
                                         "train.max_steps": 100, "eval.target_score": 20}


def test_seed_groups_join_runs_that_differ_only_by_seed(tmp_path):
    a = write_run(tmp_path / "a", seed=0)
    b = write_run(tmp_path / "b", seed=1, train={"max_seconds": 99},
                  eval={"stop_at_target": True, "probe_frames": 0, "stop_if_dead": False},
                  run={"log_every": 3})
    c = write_run(tmp_path / "c", seed=2, train={"lr": 2e-3})
    d = write_run(tmp_path / "d", game="boxing")
    e = write_run(tmp_path / "e", config=False)
    f = write_run(tmp_path / "f", config=False)
    groups = R.seed_groups(R.load_runs([a, c, b, d, e, f]))
    assert [[run.name for run in group] for group in groups] == [
        ["a", "b"], ["c"], ["d"], ["e"], ["f"]]  # a run without a config is alone


def test_group_label_is_the_shared_parent_or_the_names():
    seeds = [run_of("seed0", "/runs/pong_64/seed0"), run_of("seed1", "/runs/pong_64/seed1")]
    assert R.group_label(seeds) == "pong_64"
    assert R.group_label([run_of("a", "/x/a"), run_of("b", "/y/b")]) == "a+b"
    for names, label in ((["pong", "pong-seed1"], "pong"),
                         (["pong_64_s0", "pong_64_s1"], "pong_64"),
                         (["run10", "run11"], "run10+run11")):
        assert R.group_label([run_of(name, f"/{index}/{name}")
                              for index, name in enumerate(names)]) == label
    assert R.group_label([run_of("seed0", "/runs/pong_64/seed0")]) == "seed0"


def test_cumulative_sums_each_rate_over_the_time_since_the_line_before():
    metrics: list[dict] = [{"step": 10, "time_s": 10.0, "rate": 2.0},
                           {"step": 20, "time_s": 30.0, "rate": 1.0},
                           {"step": 30, "time_s": 35.0, "rate": None}]
    assert R.cumulative(metrics, "rate") == [20.0, 40.0, 40.0]  # 2 x 10, + 1 x 20, + 0 x 5
    # linear between the lines' steps from 0 at step 0, the last total past the end
    assert R.totals_at(metrics, "rate", [5, 15, 99]) == [10.0, 30.0, 40.0]
    assert R.cumulative([], "rate") == [] and R.totals_at([], "rate", [5]) == [0.0]


def test_ended_at_target_needs_the_stop_and_a_last_evaluation_at_the_target():
    def run(stop, last):
        config = {"eval": {"stop_at_target": stop, "target_score": 20}}
        return run_of(config=config, evals=[{"mean": 5.0}, {"mean": last}] if last else [])

    assert R.ended_at_target(run(True, 20.5))
    assert not R.ended_at_target(run(True, 19.0))  # stopped for another reason
    assert not R.ended_at_target(run(False, 20.5))  # went on past the target
    assert not R.ended_at_target(run(True, None))


def test_spread_and_hold():
    assert R.spread([3.0, None, 1.0, 2.0]) == R.Spread(2.0, 1.0, 3.0, 3)
    assert R.spread([None]) is None
    assert [R.hold([1, 3], [10, 30], x) for x in (1, 2, 3, 7)] == [10, 10, 30, 30]


def test_seed_curve_counts_the_seeds_present_at_each_point():
    a, b = ([1, 3], [10, 30]), ([2, 4, 6], [0, 20, 40])
    points = [(x, tuple(s)) for x, s in R.seed_curve([a, b, ([], [])], [False, False, True])]
    assert points == [(1, (10, 10, 10, 1)),  # b has not begun
                      (2, (5, 0, 10, 2)), (3, (15, 0, 30, 2)),
                      (4, (20, 20, 20, 1)),  # a has ended
                      (6, (40, 40, 40, 1))]
    # a that ended at its target keeps its last score to the end
    held = [(x, tuple(s)) for x, s in R.seed_curve([a, b], [True, False])]
    assert held[3:] == [(4, (25, 20, 30, 2)), (6, (35, 30, 40, 2))]
