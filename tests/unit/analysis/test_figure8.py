"""The predicted Figure 8: data points to a score from runs, E(W) from scale points, and
T(W) = D / (W r E), against values computed by hand."""

from __future__ import annotations

import csv
import json

import pytest

from dba3c.analysis import figure8, plots
from dba3c.analysis.runs import load_run, load_runs
from tests.support.rundirs import write_run

SCORE = 18.0


def study_run(path, workers: int, seed: int, means: list[float]):
    """A Pong run of ``workers`` emulated workers (0: the preset's one worker, mini-batch
    64; else W x 32), evaluated at steps 10, 20, ... with ``means``."""
    times = [float(i) for i in range(len(means))]
    evals = list(zip(times, means))
    if workers == 0:
        return write_run(path, seed=seed, evals=evals, metrics_times=times,
                         train={"batch_size": 64})
    return write_run(path, seed=seed, evals=evals, metrics_times=times,
                     train={"batch_size": 32}, dist={"emulate_workers": workers})


def point(workers: int, efficiency: float, link: float = 10, hidden: int = 128,
          aggregation: str = "collective", **extra) -> dict:
    return {"workers": workers, "ps": 0, "replicas": 0, "slow_workers": 0, "link_gbit": link,
            "hidden": hidden, "aggregation": aggregation, "overlap": True, "slow_factor": 2.0,
            "time_scale": 10,
            "efficiency": efficiency, **extra}


def scale_file(path, efficiency: dict[int, float]):
    path.write_text(json.dumps({"points": [
        {**point(w, e), "step_ms": 20.0, "model_step_ms": 18.0, "data_points_per_s": 1.0}
        for w, e in efficiency.items()]}))
    return path


def read_rows(path) -> list[dict]:
    with open(path, newline="") as file:
        return [r for r in csv.DictReader(file) if r["series"] == "predicted"]


def test_data_points_to_score_is_the_first_reaching_evaluation_times_the_effective_batch(
        tmp_path):
    run = load_run(study_run(tmp_path / "w16", 16, 0, [-21, 5, 18.5, 17, 20]))
    assert figure8.run_workers(run.config) == 16
    assert figure8.data_points_to_score(run, SCORE) == 30 * 16 * 32  # step 30, 512 a step
    assert figure8.data_points_to_score(run, 21) is None
    assert figure8.data_points_trained(run) == 50 * 512
    preset = load_run(study_run(tmp_path / "w1", 0, 0, [0, 19]))
    assert figure8.run_workers(preset.config) == 1
    assert figure8.data_points_to_score(preset, SCORE) == 20 * 64


def test_efficiency_is_the_best_measured_aggregation_at_the_link_and_fc_e1_is_one():
    points = [point(64, 0.8), point(64, 0.9), point(64, 0.7, aggregation="ps"),  # 0.85 > 0.7
              point(16, 0.95), point(16, 0.5, link=100), point(16, 0.2, hidden=512),
              point(16, 0.1, slow_workers=4), point(32, 0.3, error="rank 3 died")]
    assert figure8.efficiency_by_workers(points, 10, 128) == {
        1: 1.0, 64: pytest.approx(0.85), 16: 0.95}


def test_prediction_rows_by_hand(tmp_path):
    runs = load_runs([study_run(tmp_path / "w1" / "w1-s0", 0, 0, [0, 18]),      # 1280 dp
                      study_run(tmp_path / "w1" / "w1-s1", 0, 1, [0, 0, 0, 19]),  # 2560 dp
                      study_run(tmp_path / "w64" / "w64-s0", 64, 0, [18]),        # 20480 dp
                      study_run(tmp_path / "w64" / "w64-s1", 64, 1, [0, 0]),      # never
                      study_run(tmp_path / "w16" / "w16-s0", 16, 0, [0, 1])])     # never
    rate, efficiency = 100.0, {1: 1.0, 64: 0.8, 16: 0.9}
    rows = figure8.figure8_table(figure8.run_seeds(runs, SCORE), SCORE, rate, efficiency)
    ours = {row["workers"]: row for row in rows if row["series"] == "predicted"}
    assert list(ours) == [1, 16, 64]
    one, sixty_four = ours[1], ours[64]
    assert (one["seeds"], one["seeds_reached"], one["effective_batch"]) == (2, 2, 64)
    assert (one["data_points_low"], one["data_points_high"]) == (1280, 2560)
    assert one["hours_mean"] == pytest.approx(1920 / 100 / 3600)
    assert one["hours_high"] == pytest.approx(2560 / 100 / 3600)
    assert (sixty_four["seeds"], sixty_four["seeds_reached"]) == (2, 1)
    assert sixty_four["hours_mean"] == pytest.approx(20480 / (64 * 100 * 0.8) / 3600)
    # linear speed-up from W = 1: T(1) / 64
    assert sixty_four["linear_hours"] == pytest.approx(one["hours_mean"] / 64)
    assert ours[16]["not_reached_within"] == 20 * 512 and "hours_mean" not in ours[16]
    # not reached: the budget's 10,240 data points on 16 nodes at 100 x 0.9 each, a bound,
    # drawn against linear speed-up from W = 1 at that W too
    assert ours[16]["hours_at_least"] == pytest.approx(10240 / (16 * 100 * 0.9) / 3600)
    assert ours[16]["linear_hours"] == pytest.approx(one["hours_mean"] / 16)
    paper = [(r["workers"], r["hours_mean"]) for r in rows if r["series"] != "predicted"]
    assert paper == [(1, 14.2), (64, pytest.approx(0.35))]


def test_a_w_without_measured_efficiency_gets_no_prediction(tmp_path):
    runs = load_runs([study_run(tmp_path / "w16", 16, 0, [19])])
    row, = figure8.predicted_rows(figure8.run_seeds(runs, SCORE), SCORE, 100.0, {1: 1.0})
    assert row["efficiency"] is None and row["not_reached_within"] == 10 * 512
    assert "hours_at_least" not in row


def test_plot_command_writes_the_predicted_figure_from_runs_and_scale_results(tmp_path):
    paths = [study_run(tmp_path / "w1", 0, 0, [18]), study_run(tmp_path / "w64", 64, 0, [18]),
             study_run(tmp_path / "w16", 16, 0, [0, 0, 0])]
    scale = scale_file(tmp_path / "scale.json", {64: 0.5, 16: 0.8})
    written = plots.plot_command([*paths, scale], tmp_path / "out",
                                 plots.Figure8(SCORE, node_rate=50.0))
    assert {"figure8_predicted.png", "figure8_predicted.csv"} <= {p.name for p in written}
    with open(tmp_path / "out" / "figure8_predicted.csv", newline="") as file:
        rows = [r for r in csv.DictReader(file) if r["series"] == "predicted"]
    assert [int(r["workers"]) for r in rows] == [1, 16, 64]
    assert [float(r["hours_mean"] or "nan") for r in rows] == pytest.approx(
        [640 / 50 / 3600, float("nan"), 20480 / (64 * 50 * 0.5) / 3600], nan_ok=True)
    # W = 16 did not reach it in 30 steps of 512: at least that long
    assert float(rows[1]["hours_at_least"]) == pytest.approx(30 * 512 / (16 * 50 * 0.8) / 3600)


def test_the_prediction_from_recorded_tables_is_the_one_from_their_run_directories(
        tmp_path):
    # seeds whose run directories are gone are drawn from the curve table they left; each
    # run's last evaluation is its last step here, so the budgets agree too
    runs = [study_run(tmp_path / "w1" / "w1-s0", 0, 0, [0, 18]),      # 1280 dp
            study_run(tmp_path / "w1" / "w1-s2", 0, 2, [0, 0, 0, 19]),  # 2560 dp
            study_run(tmp_path / "w64" / "w64-s0", 64, 0, [0, 18.5]),   # 40960 dp
            study_run(tmp_path / "w16" / "w16-s0", 16, 0, [0, 1])]     # never
    scale = scale_file(tmp_path / "scale.json", {64: 0.5, 16: 0.8})
    figure = plots.Figure8(SCORE, node_rate=50.0)
    plots.plot_command([*runs, scale], tmp_path / "live", figure)
    # the tables of two figures, each seed of a setting in another (as the seeds of two
    # machines), so that each keeps its runs apart
    plots.plot_command([runs[0], runs[2], runs[3]], tmp_path / "first")
    plots.plot_command([runs[1]], tmp_path / "second")
    tables = [tmp_path / name / "eval_vs_data_points.csv" for name in ("first", "second")]
    workers: dict[str, str] = {}
    for table in tables:
        with open(table, newline="") as file:
            workers |= {r["run"]: r["workers"] for r in csv.DictReader(file)}
    assert workers == {"w1-s0": "1", "w1-s2": "1", "w64-s0": "64", "w16-s0": "16"}
    plots.plot_command([*tables, scale], tmp_path / "recorded", figure)
    live = read_rows(tmp_path / "live" / "figure8_predicted.csv")
    recorded = read_rows(tmp_path / "recorded" / "figure8_predicted.csv")
    assert recorded == live
    one = recorded[0]
    assert (one["workers"], one["seeds"], one["seeds_reached"]) == ("1", "2", "2")
    assert (float(one["hours_low"]), float(one["hours_high"])) == pytest.approx(
        (1280 / 50 / 3600, 2560 / 50 / 3600))
    assert float(recorded[1]["hours_at_least"]) == pytest.approx(
        20 * 512 / (16 * 50 * 0.8) / 3600)


def test_a_recorded_table_without_workers_is_refused_for_the_prediction(tmp_path):
    table = tmp_path / "eval_vs_data_points.csv"
    table.write_text("run,step,data_points,minutes,eval_mean,eval_max\n"
                     "w1-s0,10,640,1.0,18.0,19.0\n")
    figure = plots.Figure8(SCORE, node_rate=50.0)
    with pytest.raises(ValueError, match="run w1-s0: its eval_vs_data_points rows have no "
                                         "workers column"):
        plots.plot_command([table], tmp_path / "out", figure)
    plots.plot_command([table], tmp_path / "curves")  # the curves alone do not need it
    table.write_text("run,step,data_points,workers,minutes,eval_mean,eval_max\n"
                     "w1-s0,0,0,1,0.0,-21.0,-20.0\n")
    with pytest.raises(ValueError, match="run w1-s0: no evaluation after step 0"):
        plots.plot_command([table], tmp_path / "out", figure)
    with pytest.raises(ValueError, match="--score 18: no run directory or "
                                         "eval_vs_data_points table"):
        plots.plot_command([scale_file(tmp_path / "s.json", {64: 0.5})], tmp_path / "o",
                           figure)


def test_paths_may_follow_an_option(tmp_path):
    # `dba3c plot A --only P B --score ...`: A and B both read (argparse alone refuses B)
    from dba3c.cli import main

    runs = [study_run(tmp_path / "w1-s0", 0, 0, [18]), study_run(tmp_path / "w16-s0", 16, 0, [0])]
    scale = scale_file(tmp_path / "scale.json", {16: 0.8})
    assert main(["plot", str(runs[0]), "--only", "w1-*,w16-*", str(runs[1]), str(scale),
                 "--out", str(tmp_path / "out"), "--score", "18", "--node-rate", "50"]) == 0
    rows = read_rows(tmp_path / "out" / "figure8_predicted.csv")
    assert [(r["workers"], r["seeds_reached"]) for r in rows] == [("1", "1"), ("16", "0")]
    assert float(rows[1]["hours_at_least"]) == pytest.approx(10 * 512 / (16 * 50 * 0.8) / 3600)
