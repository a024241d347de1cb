"""``dba3c sweep``: a tiny real local sweep, its CSV and plots; bad grids and foreign CSVs
refused."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from dba3c.analysis import plots
from dba3c.training.rundir import SweepDir
from tests.support import dba3c, read_jsonl


@pytest.mark.slow
def test_tiny_local_sweep_writes_csv_and_plots(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["sweep", "configs/cartpole.yaml", "--grid", "dist.ps=1,2", "--workers", "1",
            "--dir", sweep, "train.max_steps=12", "eval.every=6", "eval.episodes=2",
            "run.log_every=2", "run.progress=none"]
    proc = dba3c(*args, timeout=400)
    assert "sweep 2/2: ok" in proc.stderr
    with open(sweep / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["dist.ps"] for r in rows] == ["1", "2"]
    assert all(r["status"] == "ok" for r in rows)
    for row in rows:
        run = sweep / row["run_dir"]
        # the CSV holds what the run directory says, recomputed here independently; the
        # last evaluation is of the parameters the run ended with (the chief's thread)
        evals = read_jsonl(run / "eval.jsonl")
        assert evals[-1]["step"] == 12 and evals[-1]["episodes"] == 2
        assert float(row["final_eval_mean"]) == pytest.approx(evals[-1]["mean"])
        rates = [m["perf/data_points_per_s"] for m in read_jsonl(run / "metrics.jsonl")]
        tail = rates[len(rates) // 2:]
        assert float(row["data_points_per_s"]) == pytest.approx(sum(tail) / len(tail))
        assert read_jsonl(run / "metrics.jsonl")[-1]["step"] == 12
    # plots: throughput vs parameter servers, one line through both points
    out = tmp_path / "plots"
    dba3c("plot", sweep, "--out", out)
    assert (out / "throughput_vs_ps.png").stat().st_size > 0
    figure = plots.scaling_figures(SweepDir(sweep).read_rows())["throughput_vs_ps"]
    lines = figure.axes[0].get_lines()
    assert len(lines) == 1 and np.asarray(lines[0].get_xdata()).tolist() == [1, 2]
    # a second invocation keeps finished points instead of re-running them
    before = (sweep / "sweep.csv").read_text()
    again = dba3c(*args, timeout=120)
    assert again.stderr.count("done already, kept") == 2
    assert (sweep / "sweep.csv").read_text() == before


def test_a_bad_grid_point_is_refused_before_anything_runs(tmp_path):
    sweep = tmp_path / "sweep"
    proc = dba3c("sweep", "configs/cartpole.yaml", "--grid", "train.gamma=0.9,-1",
                 "--grid", "model.hidden=8", "--dir", sweep, check=False, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: train.gamma=-1 "), proc.stderr
    assert "train.gamma=-1 must be" in lines[0]
    assert not sweep.exists()


def test_a_foreign_sweep_csv_is_refused_and_left_as_it_was(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.csv").write_bytes(b"name,score\r\na,1\r\n")
    proc = dba3c("sweep", "configs/cartpole.yaml", "--grid", "model.hidden=8", "--dir", sweep,
                 check=False, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "missing column(s) run_dir, status" in lines[0]
    assert (sweep / "sweep.csv").read_bytes() == b"name,score\r\na,1\r\n"
    assert [p.name for p in sweep.iterdir()] == ["sweep.csv"]
