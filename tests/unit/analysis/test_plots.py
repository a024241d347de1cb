"""Figures and tables of dba3c.analysis.plots from synthetic run and sweep directories."""

import csv
import json

import numpy as np
import pytest
import yaml

from dba3c.analysis import plots
from dba3c.analysis.runs import load_run, load_runs
from tests.support.rundirs import FRAMES_PER_S, write_run


def make_run(root, name, *, mode="sync", workers=1, scores=(1.0, 2.0, 3.0), evals=True):
    """A run directory with three metrics records (60 s apart) and two evaluations."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    config = {"env": {"id": "breakout"}, "model": {"kind": "ba3c", "hidden": 128},
              "dist": {"mode": mode, "ps": 1, "workers": workers}, "run": {"seed": 0},
              "train": {"batch_size": 32}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    lines = [json.dumps({"step": 10 * i, "time_s": 60.0 * i,
                         "perf/data_points_per_s": 100.0 * workers,
                         "train/online_score": score, "loss/policy": 0.1})
             for i, score in enumerate(scores, start=1)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n\n")
    if evals:
        (run_dir / "eval.jsonl").write_text("".join(
            json.dumps({"step": step, "time_s": t, "mean": m, "max": m + 5, "min": m - 1,
                        "std": 1.0, "episodes": 4}) + "\n"
            for step, t, m in ((10, 60.0, 5.0), (30, 180.0, 15.0))))
        (run_dir / "summary.json").write_text(json.dumps(
            {"time_to_target_s": None, "target_score": 300, "final_step": 30}))
    return run_dir


def make_sweep(root, rows):
    """A sweep directory: one run per row and sweep.csv (run_dir relative to the sweep for
    even rows, absolute for odd ones)."""
    sweep = root / "sweep"
    sweep.mkdir()
    columns = ["run_dir", "dist.ps", "model.hidden", "dist.workers", "dist.mode",
               "data_points_per_s", "time_to_target_s", "final_eval_mean", "status"]
    with open(sweep / "sweep.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        for index, row in enumerate(rows):
            name = f"run-{index}"
            run_dir = make_run(sweep, name, mode=row.get("dist.mode", "sync"),
                               workers=int(row.get("dist.workers", 1)))
            writer.writerow({"run_dir": run_dir if index % 2 else name, "dist.ps": 1,
                             "model.hidden": 128,
                             "dist.workers": 1, "dist.mode": "sync", "final_eval_mean": 15,
                             "status": "ok", **row})
    return sweep


def lines_by_label(figure):
    return {line.get_label(): line for line in figure.axes[0].get_lines()}


def legend_labels(figure):
    return [text.get_text() for text in figure.axes[0].get_legend().get_texts()]


WORKER_ROWS = [
    {"dist.workers": 1, "data_points_per_s": 1000, "time_to_target_s": 100},
    {"dist.workers": 2, "data_points_per_s": 1800, "time_to_target_s": 60},
    {"dist.workers": 4, "data_points_per_s": 3000, "time_to_target_s": 40},
    {"dist.workers": 8, "data_points_per_s": 5000, "time_to_target_s": "", "status": "ok"},
    {"dist.workers": 16, "data_points_per_s": 9999, "time_to_target_s": 1, "status": "failed"},
]


def as_csv_rows(rows):
    """Rows as csv.DictReader gives them (strings, defaults filled in)."""
    defaults = {"run_dir": "r", "dist.ps": "1", "model.hidden": "128", "dist.mode": "sync",
                "final_eval_mean": "", "status": "ok"}
    return [{**defaults, **{k: str(v) for k, v in row.items()}} for row in rows]


def test_load_run_reads_every_file(tmp_path):
    run = load_run(make_run(tmp_path, "a"))
    assert run.name == "a"
    assert run.config["dist"]["mode"] == "sync"
    assert [m["step"] for m in run.metrics] == [10, 20, 30]  # trailing blank line skipped
    assert [e["mean"] for e in run.evals] == [5.0, 15.0]
    assert run.summary["final_step"] == 30


def test_load_run_without_optional_files(tmp_path):
    run = load_run(make_run(tmp_path, "a", evals=False))
    assert run.evals == [] and run.summary == {}


def test_malformed_metrics_line_names_file_and_line(tmp_path):
    run_dir = make_run(tmp_path, "a")
    with open(run_dir / "metrics.jsonl", "a") as file:
        file.write('{"step": 40, "time_s": \n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl: line 5 "):
        load_run(run_dir)


def test_a_torn_last_metrics_line_of_a_live_run_is_skipped(tmp_path):
    run_dir = make_run(tmp_path, "a")
    with open(run_dir / "metrics.jsonl", "a") as file:
        file.write('{"step": 40, "time_s": 24')  # the chief is mid-write: no newline yet
    assert [m["step"] for m in load_run(run_dir).metrics] == [10, 20, 30]


def test_learning_curves(tmp_path):
    runs = [load_run(make_run(tmp_path, "a")),
            load_run(make_run(tmp_path, "b", workers=2, scores=(None, 4.0, 6.0)))]
    figures = plots.learning_curves(runs)
    assert set(figures) == {"eval_vs_time", "eval_vs_step", "eval_vs_frames",
                            "eval_vs_data_points", "online_score", "online_vs_step",
                            "throughput"}

    evals = figures["eval_vs_time"]
    assert len(evals.axes[0].get_lines()) == 4  # mean and max per run
    assert legend_labels(evals) == ["a", "b"]
    assert "[min]" in evals.axes[0].get_xlabel()
    assert "[points/episode]" in evals.axes[0].get_ylabel()
    styles = [line.get_linestyle() for line in evals.axes[0].get_lines()]
    assert styles == ["-", "--", "-", "--"]
    assert np.asarray(evals.axes[0].get_lines()[1].get_ydata()).tolist() == [10.0, 20.0]  # max
    assert np.asarray(evals.axes[0].get_lines()[0].get_xdata()).tolist() == [1.0, 3.0]  # min

    # data points: the evaluations' steps (10, 30) x workers x mini-batch 32
    by_data = lines_by_label(figures["eval_vs_data_points"])
    assert list(by_data["a"].get_xdata()) == [320, 960]
    assert list(by_data["b"].get_xdata()) == [640, 1920]
    assert list(by_data["b"].get_ydata()) == [5.0, 15.0]

    assert "[updates]" in figures["eval_vs_step"].axes[0].get_xlabel()
    assert np.asarray(figures["eval_vs_step"].axes[0].get_lines()[0].get_xdata()).tolist() == [
        10, 30]

    online = lines_by_label(figures["online_score"])
    assert list(online) == ["a", "b"]
    assert list(online["b"].get_xdata()) == [2.0, 3.0]  # the null score is skipped
    assert list(online["b"].get_ydata()) == [4.0, 6.0]
    per_step = lines_by_label(figures["online_vs_step"])
    assert "[updates]" in figures["online_vs_step"].axes[0].get_xlabel()
    assert list(per_step["b"].get_xdata()) == [20, 30]  # the same scores, at their steps
    assert list(per_step["b"].get_ydata()) == [4.0, 6.0]

    throughput = figures["throughput"].axes[0]
    assert "[data points/s]" in throughput.get_ylabel()
    assert legend_labels(figures["throughput"]) == ["a", "b"]


def test_seeds_of_one_config_are_drawn_as_their_mean_with_a_min_max_band(tmp_path):
    # seed 1 stops at its target (20.5 at 2 min) and keeps that score; seed 2 ends at 2 min
    # below it and leaves the curve after its last evaluation
    target = {"target_score": 20}
    seeds = [write_run(tmp_path / "pong_64" / "seed0", seed=0, eval=target,
                       metrics_times=[60, 120, 180], evals=[(60, -20.0), (180, -10.0)]),
             write_run(tmp_path / "pong_64" / "seed1", seed=1,
                       eval={**target, "stop_at_target": True}, metrics_times=[60, 120],
                       evals=[(120, 20.5)]),
             write_run(tmp_path / "pong_64" / "seed2", seed=2, eval=target,
                       metrics_times=[60, 120], evals=[(60, -21.0), (120, -15.0)])]
    other = write_run(tmp_path / "other", eval=target, train={"lr": 2e-3}, metrics_times=[60],
                      evals=[(60, 0.0)])
    tables = plots.learning_curve_tables(load_runs([*seeds, other]))
    label = "pong_64 (3 seeds)"
    by_time = [(r["run"], r.get("seeds"), r["minutes"], r["eval_mean"], r.get("eval_mean_min"),
                r.get("eval_mean_max")) for r in tables["eval_vs_time"]]
    assert by_time == [(label, 2, 1.0, -20.5, -21.0, -20.0),
                       (label, 3, 2.0, pytest.approx(-14.5 / 3), -20.0, 20.5),
                       (label, 2, 3.0, 5.25, -10.0, 20.5),
                       ("other", None, 1.0, 0.0, None, None)]
    assert tables["eval_vs_time"][0]["eval_max"] == -19.5  # each game's max: mean + 1
    assert tables["eval_vs_time"][-1] == {"run": "other", "step": 10, "minutes": 1.0,
                                          "eval_mean": 0.0, "eval_max": 1.0}  # as before
    # against frames: each evaluation at the frames emulated by its step (steps 10, 20 are
    # the metrics lines at 60 s and 120 s)
    by_frames = [(r["seeds"], r["frames"], r["eval_mean"]) for r in tables["eval_vs_frames"]
                 if r["run"] == label]
    assert by_frames == [(3, 60 * FRAMES_PER_S, pytest.approx(-20.5 / 3)),
                         (3, 120 * FRAMES_PER_S, -1.5)]

    figure = plots.draw_figure("eval_vs_time", tables["eval_vs_time"])
    assert legend_labels(figure) == [label, "other"]
    again = write_run(tmp_path / "pong_64" / "again", seed=0, eval=target, metrics_times=[60],
                      evals=[(60, 1.0)])  # seed 0 a second time: runs, not seeds
    assert plots.learning_curve_tables(load_runs([*seeds, again]))["eval_vs_time"][0][
        "run"] == "pong_64 (4 runs)"
    (band,) = figure.axes[0].collections  # the seeds' min-max band; none for a single run
    assert np.asarray(band.get_paths()[0].vertices)[:, 1].min() == -21.0


def test_learning_curves_leave_out_empty_figures(tmp_path):
    runs = [load_run(make_run(tmp_path, "a", evals=False))]
    assert set(plots.learning_curves(runs)) == {"online_score", "online_vs_step", "throughput"}


def test_workers_scaling_with_ideal_lines():
    figures = plots.scaling_figures(as_csv_rows(WORKER_ROWS))
    assert set(figures) == {"time_to_target_vs_workers", "throughput_vs_workers"}

    time = figures["time_to_target_vs_workers"]
    lines = lines_by_label(time)
    assert set(lines) == {"measured", "ideal linear"}
    # the unreached (8) and failed (16) runs are left out
    assert list(lines["measured"].get_xdata()) == [1, 2, 4]
    assert list(lines["measured"].get_ydata()) == [100, 60, 40]
    assert list(lines["ideal linear"].get_ydata()) == [100.0, 50.0, 25.0]
    assert time.axes[0].get_xscale() == "log" and time.axes[0].get_yscale() == "log"
    assert "[s]" in time.axes[0].get_ylabel()

    lines = lines_by_label(figures["throughput_vs_workers"])
    assert list(lines["measured"].get_xdata()) == [1, 2, 4, 8]
    assert list(lines["ideal linear"].get_ydata()) == [1000.0, 2000.0, 4000.0, 8000.0]


def test_scaling_tables_average_repeats_and_split_series():
    rows = as_csv_rows([
        {"dist.workers": 1, "model.hidden": 128, "data_points_per_s": 100},
        {"dist.workers": 1, "model.hidden": 128, "data_points_per_s": 300},
        {"dist.workers": 2, "model.hidden": 128, "data_points_per_s": 400},
        {"dist.workers": 2, "model.hidden": 256, "data_points_per_s": 200},
        {"dist.workers": 4, "model.hidden": 256, "data_points_per_s": 300},
    ])
    tables = plots.scaling_tables(rows)
    assert set(tables) == {"throughput_vs_workers", "throughput_vs_hidden"}  # no times
    assert tables["throughput_vs_workers"] == [
        {"series": "model.hidden=128", "dist.workers": 1, "data_points_per_s": 200,
         "runs": 2, "ideal_linear": 200.0},
        {"series": "model.hidden=128", "dist.workers": 2, "data_points_per_s": 400,
         "runs": 1, "ideal_linear": 400.0},
        {"series": "model.hidden=256", "dist.workers": 2, "data_points_per_s": 200,
         "runs": 1, "ideal_linear": 200.0},
        {"series": "model.hidden=256", "dist.workers": 4, "data_points_per_s": 300,
         "runs": 1, "ideal_linear": 400.0},
    ]
    labels = legend_labels(plots.draw_figure("throughput_vs_workers",
                                             tables["throughput_vs_workers"]))
    assert labels == ["model.hidden=128", "ideal linear (model.hidden=128)",
                      "model.hidden=256", "ideal linear (model.hidden=256)"]


def test_hidden_and_ps_figures():
    rows = as_csv_rows([
        {"dist.workers": 4, "model.hidden": 64, "dist.ps": 1, "data_points_per_s": 900},
        {"dist.workers": 4, "model.hidden": 128, "dist.ps": 1, "data_points_per_s": 800},
        {"dist.workers": 4, "model.hidden": 128, "dist.ps": 2, "data_points_per_s": 850},
    ])
    figures = plots.scaling_figures(rows)
    assert set(figures) == {"throughput_vs_hidden", "throughput_vs_ps"}
    hidden = figures["throughput_vs_hidden"].axes[0]
    assert "model.hidden" in hidden.get_xlabel() and "[data points/s]" in hidden.get_ylabel()
    lines = lines_by_label(figures["throughput_vs_hidden"])
    assert list(lines["dist.ps=1"].get_xdata()) == [64, 128]
    assert list(lines["dist.ps=1"].get_ydata()) == [900, 800]
    assert not any(label.startswith("ideal") for label in lines)


def test_sync_vs_async(tmp_path):
    sync = load_run(make_run(tmp_path, "s", mode="sync"))
    assert plots.sync_vs_async([sync]) is None
    other = load_run(make_run(tmp_path, "x", mode="async", scores=(0.5, 1.0, 1.5)))
    figure = plots.sync_vs_async([sync, other])
    assert figure is not None
    assert legend_labels(figure) == ["sync", "async"]
    assert "[min]" in figure.axes[0].get_xlabel()
    assert list(lines_by_label(figure)["async"].get_ydata()) == [0.5, 1.0, 1.5]
    second = load_run(make_run(tmp_path, "t", mode="sync"))
    labels = legend_labels(plots.sync_vs_async([sync, other, second]))
    assert labels == ["sync (s)", "async", "sync (t)"]


def test_write_outputs(tmp_path):
    table = plots.scaling_tables(as_csv_rows(WORKER_ROWS))["time_to_target_vs_workers"]
    figure = plots.draw_figure("time_to_target_vs_workers", table)
    written = plots.write_outputs({"ttt": (figure, table)}, tmp_path / "out")
    assert written == [tmp_path / "out" / "ttt.png", tmp_path / "out" / "ttt.csv"]
    assert written[0].stat().st_size > 1000
    with open(written[1], newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(r["dist.workers"], r["time_to_target_s"], r["ideal_linear"]) for r in rows] == [
        ("1", "100", "100.0"), ("2", "60", "50.0"), ("4", "40", "25.0")]
    assert rows[0]["series"] == "" and rows[0]["runs"] == "1"


def test_plot_command_on_sweep_and_run(tmp_path):
    sweep = make_sweep(tmp_path, [
        {"dist.workers": 1, "data_points_per_s": 100, "time_to_target_s": 100},
        {"dist.workers": 2, "data_points_per_s": 190, "time_to_target_s": 55,
         "dist.mode": "async"},
    ])
    single = make_run(tmp_path, "single", workers=4)
    out = tmp_path / "figures"
    written = plots.plot_command([str(sweep), single, sweep / "run-0"], out)
    names = {path.name for path in written}
    stems = ["eval_vs_time", "eval_vs_step", "eval_vs_frames", "eval_vs_data_points",
             "online_score",
             "online_vs_step", "throughput", "sync_vs_async",
             "time_to_target_vs_workers", "throughput_vs_workers"]
    assert names == {f"{stem}.{ext}" for stem in stems for ext in ("png", "csv")}
    assert all(path.stat().st_size > 0 for path in written)
    with open(out / "online_score.csv", newline="") as file:
        runs = [row["run"] for row in csv.DictReader(file)]
    assert runs == ["run-0"] * 3 + ["run-1"] * 3 + ["single"] * 3  # run-0 only once
    with open(out / "throughput_vs_workers.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    # dist.mode varies too, so each mode is its own series with its own ideal line
    assert [(r["series"], r["dist.workers"], r["ideal_linear"]) for r in rows] == [
        ("dist.mode=sync", "1", "100.0"), ("dist.mode=async", "2", "190.0")]


def test_plot_command_rejects_other_paths(tmp_path):
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(ValueError, match=f"^{bad}: expected a run directory"):
            plots.plot_command([bad], tmp_path / "out")


def test_recorded_group_drops_a_seed_at_the_end_of_a_name():
    cases = {"w1-s0": "w1", "w1-bf16-s12": "w1-bf16", "pong-seed2": "pong", "pong": "pong",
             "breakout_64/seed1": "breakout_64", "pong_64_s1": "pong_64", "seed1": "seed1",
             "run10": "run10", "w1-s0x": "w1-s0x", "pongs1": "pongs1"}
    assert {label: plots.recorded_group(label) for label in cases} == cases


def test_curve_tables_read_back_draw_their_runs_as_seeds_of_one_experiment(tmp_path):
    # each seed's table written alone (so its rows are the run's own), as a study keeps
    # them once the run directories are gone; read back together, w1-s0 and w1-s1 are one
    # curve, w1-s1 leaving it after its last evaluation; w16-s0 stays a run of its own
    seeds = [write_run(tmp_path / "runs" / "w1-s0", seed=0, metrics_times=[60, 120, 180],
                       evals=[(60, -21.0), (120, -11.0), (180, 3.0)]),
             write_run(tmp_path / "runs" / "w1-s1", seed=1, metrics_times=[60, 120],
                       evals=[(60, -19.0), (120, -15.0)])]
    other = write_run(tmp_path / "runs" / "w16-s0", train={"lr": 2e-3}, metrics_times=[60],
                      evals=[(60, -20.0)])
    tables = []
    for index, (run, more) in enumerate([(seeds[0], [other]), (seeds[1], [])]):
        plots.plot_command([run, *more], tmp_path / f"table{index}")
        tables.append(tmp_path / f"table{index}" / "eval_vs_time.csv")
    out = tmp_path / "again"
    written = plots.plot_command([*tables, tables[0]], out)  # a table twice: once
    assert {path.name for path in written} == {"eval_vs_time.png", "eval_vs_time.csv"}
    with open(out / "eval_vs_time.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    got = [(r["run"], r["seeds"], r["minutes"], r["eval_mean"], r["eval_mean_min"],
            r["eval_mean_max"]) for r in rows]
    assert got == [("w1 (2 seeds)", "2", "1.0", "-20.0", "-21.0", "-19.0"),
                   ("w1 (2 seeds)", "2", "2.0", "-13.0", "-15.0", "-11.0"),
                   ("w1 (2 seeds)", "1", "3.0", "3.0", "3.0", "3.0"),
                   ("w16-s0", "", "1.0", "-20.0", "", "")]
    # the same curve as from the run directories themselves, where the seeds are one group
    # by their configs (and named by their parent directory)
    direct = plots.learning_curve_tables(load_runs(seeds))["eval_vs_time"]
    assert [(r["minutes"], r["eval_mean"], r["eval_max_max"]) for r in direct] == [
        (float(r["minutes"]), float(r["eval_mean"]), float(r["eval_max_max"]))
        for r in rows[:3]]


def test_a_recorded_run_that_ended_at_its_target_keeps_its_score_in_the_band(tmp_path):
    # seed 0 stops at its target (20.5 at 1 min); read back beside seed 1 it keeps 20.5 at
    # 2 min, as it does when both are drawn from their run directories
    target = {"target_score": 20}
    seeds = [write_run(tmp_path / "runs" / "w4-s0", seed=0,
                       eval={**target, "stop_at_target": True}, metrics_times=[60],
                       evals=[(60, 20.5)]),
             write_run(tmp_path / "runs" / "w4-s1", seed=1, eval=target,
                       metrics_times=[60, 120], evals=[(60, -21.0), (120, -11.0)])]
    tables = []
    for index, run in enumerate(seeds):
        plots.plot_command([run], tmp_path / f"table{index}")
        tables.append(tmp_path / f"table{index}" / "eval_vs_time.csv")
    with open(tables[0], newline="") as file:
        assert [r["ended_at_target"] for r in csv.DictReader(file)] == ["1"]
    plots.plot_command(tables, tmp_path / "again")
    with open(tmp_path / "again" / "eval_vs_time.csv", newline="") as file:
        got = [(r["seeds"], r["minutes"], r["eval_mean"]) for r in csv.DictReader(file)]
    assert got == [("2", "1.0", "-0.25"), ("2", "2.0", "4.75")]
    direct = plots.learning_curve_tables(load_runs(seeds))["eval_vs_time"]
    assert [(r["seeds"], r["eval_mean"]) for r in direct] == [(2, -0.25), (2, 4.75)]


def test_recorded_runs_and_run_directories_are_drawn_together_unless_names_clash(tmp_path):
    recorded = write_run(tmp_path / "old" / "w1-s0", metrics_times=[60], evals=[(60, -21.0)])
    plots.plot_command([recorded], tmp_path / "table")
    table = tmp_path / "table" / "eval_vs_time.csv"
    live = write_run(tmp_path / "new" / "w1-bf16-s0", train={"lr": 2e-3}, metrics_times=[60],
                     evals=[(60, -5.0)])
    plots.plot_command([live, table], tmp_path / "both")
    with open(tmp_path / "both" / "eval_vs_time.csv", newline="") as file:
        assert [(r["run"], r["eval_mean"]) for r in csv.DictReader(file)] == [
            ("w1-bf16-s0", "-5.0"), ("w1-s0", "-21.0")]
    with pytest.raises(ValueError, match="eval_vs_time: w1-s0 is both a run directory's curve "
                                         "and a recorded one"):
        plots.plot_command([recorded, table], tmp_path / "clash")


def test_only_keeps_the_runs_whose_name_matches_a_pattern(tmp_path):
    recorded = [write_run(tmp_path / "old" / name, train={"lr": lr}, metrics_times=[60],
                          evals=[(60, score)])
                for name, lr, score in (("w1-s0", 1e-3, -21.0), ("w16-s0", 3e-3, -20.0))]
    plots.plot_command(recorded, tmp_path / "table")
    table = tmp_path / "table" / "eval_vs_time.csv"
    live = [write_run(tmp_path / "new" / name, train={"lr": 2e-3}, metrics_times=[60],
                      evals=[(60, score)])
            for name, score in (("w1-bf16-s0", -5.0), ("w16-bf16-s0", -7.0))]
    plots.plot_command([*live, table], tmp_path / "w1", only=["w1-*"])
    with open(tmp_path / "w1" / "eval_vs_time.csv", newline="") as file:
        assert [(r["run"], r["eval_mean"]) for r in csv.DictReader(file)] == [
            ("w1-bf16-s0", "-5.0"), ("w1-s0", "-21.0")]
    with pytest.raises(ValueError, match="^--only w2-\\*,x: no run's name matches"):
        plots.plot_command([*live, table], tmp_path / "none", only=["w2-*", "x"])


@pytest.mark.parametrize("name, text, error", [
    ("figure8_predicted_10.csv", "run,workers\n", "not a learning curve's table"),
    ("eval_vs_time.csv", "run,minutes,eval_mean\n", "no column eval_max"),
    ("eval_vs_time.csv", "run,seeds,minutes,eval_mean,eval_max\na (2 seeds),2,1,0,1\n",
     "its curves are means over seeds"),
    ("eval_vs_time.csv", "run,minutes,eval_mean,eval_max\na,1,0,1\na,2,zero,1\n",
     "line 3, column eval_mean: 'zero' is not a number"),
    ("eval_vs_time.csv", "run,minutes,eval_mean,eval_max\na,1,0,1,7\n",
     "line 2: more cells than columns"),
])
def test_a_table_that_cannot_be_drawn_again_is_refused_by_name(tmp_path, name, text, error):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^{path}: {error}"):
        plots.plot_command([path], tmp_path / "out")


def test_draw_figure_rejects_unknown_name():
    with pytest.raises(ValueError, match="unknown figure 'nope'"):
        plots.draw_figure("nope", [])


def scale_point(workers, ps, *, link=10, hidden=128, replicas=0, slow=0, step_ms=20.0):
    """A measured point of dba3c bench scale (T_c 10 ms, batch 32, model 10% faster)."""
    return {"workers": workers, "ps": ps, "hidden": hidden, "replicas": replicas,
            "slow_workers": slow, "slow_factor": 2.0, "link_gbit": link,
            "time_scale": 10 if link == 10 else 50, "step_ms": step_ms,
            "model_step_ms": step_ms * 0.9, "efficiency": 10.0 / step_ms,
            "data_points_per_s": (replicas or workers) * 32 / (step_ms / 1000)}


def test_scale_results_give_efficiency_throughput_vs_ps_and_vs_fc(tmp_path):
    points = [scale_point(1, 1, step_ms=12.5), scale_point(4, 1, step_ms=20.0),
              scale_point(4, 1, link=100, step_ms=10.5), scale_point(1, 1, link=100),
              scale_point(4, 4, step_ms=16.0), scale_point(4, 4, hidden=512, step_ms=40.0),
              scale_point(4, 4, replicas=3, slow=1, step_ms=11.0),  # in no figure
              {**scale_point(4, 2), "error": "rank 3 died"}]  # failed: in no figure
    points[-1].pop("step_ms")
    results = {"points": points}
    tables = plots.scale_tables(results)
    assert list(tables) == ["scale_efficiency_vs_workers", "scale_throughput_vs_ps",
                            "scale_throughput_vs_hidden"]
    efficiency = [(r["series"], r["workers"], r["efficiency"], r["ideal_linear"])
                  for r in tables["scale_efficiency_vs_workers"]]
    assert efficiency == [("10 Gb/s, P=1", 1, 0.8, 1.0), ("10 Gb/s, P=1", 4, 0.5, 1.0),
                          ("10 Gb/s, P=4", 4, 0.625, 1.0), ("100 Gb/s, P=1", 1, 0.5, 1.0),
                          ("100 Gb/s, P=1", 4, 10 / 10.5, 1.0)]
    # the model's step is 10% shorter: its efficiency 1/0.9 times the measured one
    assert tables["scale_efficiency_vs_workers"][0]["model_efficiency"] == pytest.approx(
        0.8 / 0.9)
    by_ps = [(r["series"], r["ps"], r["data_points_per_s"])
             for r in tables["scale_throughput_vs_ps"]]
    assert by_ps == [("W=4, 10 Gb/s, FC 128", 1, 6400.0), ("W=4, 10 Gb/s, FC 128", 4, 8000.0),
                     ("W=4, 100 Gb/s, FC 128", 1, pytest.approx(4 * 32 / 0.0105))]
    by_fc = [(r["series"], r["hidden"], r["data_points_per_s"])
             for r in tables["scale_throughput_vs_hidden"]]
    assert by_fc == [("W=4, P=4, 10 Gb/s", 128, 8000.0), ("W=4, P=4, 10 Gb/s", 512, 3200.0)]

    path = tmp_path / "scale.json"
    path.write_text(json.dumps(results))
    written = plots.plot_command([path], tmp_path / "figures")
    assert {p.name for p in written} == {f"{name}.{ext}" for name in tables
                                         for ext in ("png", "csv")}
    with open(tmp_path / "figures" / "scale_throughput_vs_ps.csv", newline="") as file:
        assert [row["data_points_per_s"] for row in csv.DictReader(file)][:2] == ["6400.0",
                                                                                   "8000.0"]


def test_several_scale_results_are_drawn_together_both_modes_in_one_efficiency_figure(
        tmp_path):
    # a ps run to W = 4 and two collective runs (overlapped) to W = 8, one at W = 4 twice
    ps_run = [scale_point(1, 1, step_ms=12.5), scale_point(4, 1, step_ms=20.0)]
    def coll(workers: int, step_ms: float) -> dict:
        return {**scale_point(workers, 0, step_ms=step_ms), "aggregation": "collective",
                "overlap": True}

    first, second = [coll(2, 12.5), coll(4, 16.0)], [coll(4, 10.0), coll(8, 20.0)]
    paths = []
    for name, points in (("ps", ps_run), ("c1", first), ("c2", second)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps({"points": points}))
    written = plots.plot_command(paths, tmp_path / "figures")
    assert {p.name for p in written} == {"scale_efficiency_vs_workers.png",
                                         "scale_efficiency_vs_workers.csv"}
    with open(tmp_path / "figures" / "scale_efficiency_vs_workers.csv", newline="") as file:
        rows = [(r["series"], int(r["workers"]), float(r["efficiency"]), int(r["runs"]))
                for r in csv.DictReader(file)]
    assert rows == [("10 Gb/s, P=1", 1, 0.8, 1), ("10 Gb/s, P=1", 4, 0.5, 1),
                    ("10 Gb/s, collective, overlapped", 2, 0.8, 1),
                    ("10 Gb/s, collective, overlapped", 4, (0.625 + 1.0) / 2, 2),
                    ("10 Gb/s, collective, overlapped", 8, 0.5, 1)]
    assert plots.scale_mode({"aggregation": "collective", "overlap": False, "ps": 0}) == (
        "collective, serial")
    assert plots.scale_mode({"aggregation": "collective", "overlap": True, "ps": 0,
                             "wire_dtype": "bfloat16"}) == (
        "collective, overlapped, bfloat16 on the wire")
    # one ideal line (E = 1) over every series' W, on a linear efficiency axis from 0
    table = plots.scale_tables({"points": ps_run + first + second})
    figure = plots.draw_figure("scale_efficiency_vs_workers", table["scale_efficiency_vs_workers"])
    lines = lines_by_label(figure)
    assert set(lines) == {"10 Gb/s, P=1", "10 Gb/s, collective, overlapped", "ideal linear"}
    assert list(lines["ideal linear"].get_xdata()) == [1, 2, 4, 8]
    assert list(lines["ideal linear"].get_ydata()) == [1.0] * 4
    assert figure.axes[0].get_yscale() == "linear" and figure.axes[0].get_ylim()[0] == 0


def test_points_with_gradients_in_bfloat16_are_series_apart_from_float32s():
    # the same points twice, float32 and bfloat16 on the wire (bfloat16 steps 4 ms faster),
    # and one float32 point recorded before points had a wire dtype
    points = [(1, 4, 128, 12.5), (4, 1, 128, 20.0), (4, 4, 128, 16.0), (4, 4, 512, 40.0)]
    float32 = [scale_point(w, ps, hidden=fc, step_ms=ms) for w, ps, fc, ms in points]
    for point in float32[1:]:
        point["wire_dtype"] = "float32"
    bfloat16 = [{**scale_point(w, ps, hidden=fc, step_ms=ms - 4.0), "wire_dtype": "bfloat16"}
                for w, ps, fc, ms in points]
    tables = plots.scale_tables({"points": float32 + bfloat16})
    bf16 = ", bfloat16 on the wire"
    assert [(r["series"], r["workers"], round(r["efficiency"], 9))
            for r in tables["scale_efficiency_vs_workers"]] == [
        ("10 Gb/s, P=1", 4, 0.5), (f"10 Gb/s, P=1{bf16}", 4, 0.625), ("10 Gb/s, P=4", 1, 0.8),
        ("10 Gb/s, P=4", 4, 0.625), (f"10 Gb/s, P=4{bf16}", 1, round(10 / 8.5, 9)),
        (f"10 Gb/s, P=4{bf16}", 4, round(10 / 12, 9))]
    assert [(r["series"], r["ps"]) for r in tables["scale_throughput_vs_ps"]] == [
        ("W=4, 10 Gb/s, FC 128", 1), ("W=4, 10 Gb/s, FC 128", 4),
        (f"W=4, 10 Gb/s, FC 128{bf16}", 1), (f"W=4, 10 Gb/s, FC 128{bf16}", 4)]
    assert [(r["series"], r["hidden"], round(r["data_points_per_s"], 6))
            for r in tables["scale_throughput_vs_hidden"]] == [
        ("W=4, P=4, 10 Gb/s", 128, 8000.0), ("W=4, P=4, 10 Gb/s", 512, 3200.0),
        (f"W=4, P=4, 10 Gb/s{bf16}", 128, round(4 * 32 / 0.012, 6)),
        (f"W=4, P=4, 10 Gb/s{bf16}", 512, round(4 * 32 / 0.036, 6))]


def test_a_json_file_that_is_not_scale_results_is_refused(tmp_path):
    for text, why in (("[1, 2]", "not dba3c bench scale results"),
                      ('{"points": [{"workers": 1}]}', "'points' each have hidden, link_gbit"),
                      ("{", "not readable as dba3c bench scale results")):
        path = tmp_path / "bad.json"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"^{path}: .*{why}"):
            plots.plot_command([path], tmp_path / "out")


def test_eval_against_data_points_of_emulated_workers(tmp_path):
    """Each step of a run emulating 4 workers of mini-batch 32 trains on 4 x 32 data points;
    a run whose config does not give its mini-batch has no such curve."""
    run = write_run(tmp_path / "w4", train={"batch_size": 32}, dist={"emulate_workers": 4},
                    metrics_times=[60, 120], evals=[(60, -20.0), (120, -18.0)])
    table = plots.learning_curve_tables(load_runs([run]))["eval_vs_data_points"]
    assert [(r["step"], r["data_points"], r["eval_mean"]) for r in table] == [
        (10, 1280, -20.0), (20, 2560, -18.0)]
    bare = make_run(tmp_path, "bare")
    (bare / "config.yaml").write_text(yaml.safe_dump({"env": {"id": "breakout"}}))
    assert "eval_vs_data_points" not in plots.learning_curve_tables([load_run(bare)])
