"""``dba3c table`` and the seeds of ``dba3c plot`` end to end, through the command line, on
short real runs: two seeds of the paper's one-node Pong preset (12 steps each, evaluations of 2
games of at most 400 frames), in directories whose names say nothing; and each kind of bad
input as one ``error:`` line, exit code 2."""

from __future__ import annotations

import csv
import shutil
from contextlib import ExitStack

import pytest
import yaml

from tests.support import dba3c, read_jsonl
from tests.support.jobs import Job

pytestmark = pytest.mark.slow

TINY = ["train.max_steps=12", "train.max_seconds=0", "eval.every=5", "eval.episodes=2",
        "eval.max_frames=400", "eval.num_envs=2", "env.num_envs=4", "env.batch_size=4",
        "train.batch_size=8", "run.progress=none"]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """Seeds 0 and 1 of one config, trained side by side."""
    root = tmp_path_factory.mktemp("table")
    dirs = [root / "first", root / "elsewhere" / "second"]
    with ExitStack() as stack:
        jobs = [stack.enter_context(Job("train", "configs/paper/pong_1node.yaml",
                                        f"run.dir={run}", f"run.seed={seed}", *TINY))
                for seed, run in enumerate(dirs)]
        for job in jobs:
            assert job.wait(timeout=180) == 0, job.output[-3000:]
    return dirs


def test_two_seeds_make_one_row_beside_the_papers(seeds, tmp_path):
    out = tmp_path / "table"
    proc = dba3c("table", *seeds, "--out", out)
    best = [max(e["mean"] for e in read_jsonl(run / "eval.jsonl")) for run in seeds]
    with open(out / "table.csv", newline="") as file:
        (row,) = csv.DictReader(file)
    assert (row["game"], row["seeds"], row["seed_values"]) == ("pong", "2", "0 1")
    assert float(row["best_mean"]) == pytest.approx(sum(best) / 2)
    assert (float(row["best_min"]), float(row["best_max"])) == (min(best), max(best))
    assert (row["paper_score"], row["paper_hours"], row["ga3c_score"]) == ("20.0", "4.0", "18.0")
    # 12-step runs: nothing by the paper's 4 h, and 20 not reached
    assert (row["at_paper_time_seeds"], row["hours_to_paper_score_seeds"]) == ("0", "0")
    assert float(row["frames_min"]) > 0 and 0 < float(row["hours_max"]) < 0.01
    assert proc.stdout.startswith((out / "table.md").read_text())
    assert "| pong | first+second | 2 |" in proc.stdout and "| 20 (4 h) | 18 (1 h) |" in \
        proc.stdout
    assert "these runs' are not" in proc.stdout  # 2 games, not the paper's 50
    assert [line for line in proc.stdout.splitlines() if line.startswith("/")] == [
        str(out / name) for name in ("table.md", "table.png", "table.csv", "seeds.csv")]

    figures = tmp_path / "figures"
    dba3c("plot", *seeds, "--out", figures)
    with open(figures / "eval_vs_frames.csv", newline="") as file:
        assert {r["run"] for r in csv.DictReader(file)} == {"first+second (2 seeds)"}


def test_table_input_it_cannot_use_is_one_error_line(seeds, tmp_path):
    def copy_with(name, section, key, value):
        run = shutil.copytree(seeds[0], tmp_path / name)
        config = yaml.safe_load((run / "config.yaml").read_text())
        config[section][key] = value
        (run / "config.yaml").write_text(yaml.safe_dump(config))
        return run

    cases = [([tmp_path], f"error: {tmp_path}: not a run directory (no metrics.jsonl)"),
             ([seeds[0], copy_with("games30", "eval", "episodes", 30)],
              "error: runs of different evaluation protocols cannot share a table: "),
             ([copy_with("alien", "env", "id", "alien")],
              "env.id='alien' is not a game of the paper's Table 3")]
    for paths, message in cases:
        proc = dba3c("table", *paths, "--out", tmp_path / "out", check=False)
        assert proc.returncode == 2 and message in proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
