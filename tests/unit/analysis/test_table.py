"""dba3c.analysis.table (``dba3c table``) on run directories written by hand, with known
scores and times; every expected value is worked out by hand from them.

The paper (Table 3): Pong 20 in 4 h (14400 s), Boxing 98 in 0.5 h (1800 s). Human and
random scores: Pong -20.7 and 14.6 (a range of 35.3), Boxing 0.1 and 12.1 (12).
"""

import csv

import pytest
from matplotlib.patches import Rectangle

from dba3c.analysis import table as T
from dba3c.analysis.runs import load_runs
from tests.support.rundirs import DATA_POINTS_PER_S, FRAMES_PER_S, write_run

HOURS = 3600.0
TARGET = {"target_score": 20}


@pytest.fixture
def pong_seeds(tmp_path):
    """Three seeds of one Pong config: seed 0 runs 5 h and reaches 20 at 5 h; seed 1 stops
    at its target, 20.5 at 2 h; seed 2 stopped early (1 h, no target) at -5."""
    root = tmp_path / "pong_64"
    return [
        write_run(root / "seed0", seed=0, eval=TARGET, metrics_times=[3600, 14400, 18000],
                  evals=[(3600, -10.0), (7200, 5.0), (14000, 18.0), (18000, 21.0)]),
        write_run(root / "seed1", seed=1, eval={**TARGET, "stop_at_target": True},
                  metrics_times=[3600, 7200], evals=[(3600, 0.0), (7200, 20.5)]),
        write_run(root / "seed2", seed=2, eval=TARGET, metrics_times=[1800, 3600],
                  evals=[(3600, -5.0)]),
    ]


def test_seed_results_against_the_papers_score_and_time(pong_seeds):
    results = [T.seed_result(run) for run in load_runs(pong_seeds)]
    assert [r.seed for r in results] == [0, 1, 2]
    assert [r.best for r in results] == [21.0, 20.5, -5.0]
    assert [r.hns for r in results] == pytest.approx([41.7 / 35.3, 41.2 / 35.3, 15.7 / 35.3])
    # the last evaluation by 4 h: seed 0's at 14000 s; seed 1 ended at its target at 2 h
    # and keeps 20.5; seed 2 ended at 1 h below it: no score at 4 h
    assert [r.at_paper_time for r in results] == [18.0, 20.5, None]
    assert [r.hours_to_paper_score for r in results] == [5.0, 2.0, None]
    assert [r.hours for r in results] == [5.0, 2.0, 1.0]
    assert [r.data_points for r in results] == [DATA_POINTS_PER_S * t for t in (18000, 7200,
                                                                                3600)]
    assert [r.frames for r in results] == [FRAMES_PER_S * t for t in (18000, 7200, 3600)]


def test_a_group_row_gives_each_measure_over_the_seeds_that_have_it(pong_seeds):
    rows, seeds = T.table_rows(load_runs(pong_seeds))
    assert len(rows) == 1 and len(seeds) == 3
    row = rows[0]
    assert (row["game"], row["config"], row["seeds"], row["seed_values"]) == (
        "pong", "pong_64", 3, "0 1 2")
    assert (row["paper_score"], row["paper_hours"]) == (20.0, 4.0)
    assert (row["best_mean"], row["best_min"], row["best_max"], row["best_seeds"]) == (
        pytest.approx(36.5 / 3), -5.0, 21.0, 3)
    assert (row["at_paper_time_mean"], row["at_paper_time_min"], row["at_paper_time_max"],
            row["at_paper_time_seeds"]) == (19.25, 18.0, 20.5, 2)
    assert (row["hours_to_paper_score_mean"], row["hours_to_paper_score_min"],
            row["hours_to_paper_score_max"], row["hours_to_paper_score_seeds"]) == (
        3.5, 2.0, 5.0, 2)
    assert row["hours_mean"] == pytest.approx(8 / 3)
    assert row["frames_max"] == FRAMES_PER_S * 18000
    assert (row["ddrl_a3c_score"], row["ddrl_a3c_hours"], row["ga3c_score"],
            row["ba3c_hours"], row["a3c_score"]) == (20.0, 4.0, 18.0, 24.0, 20.0)
    assert row["runs"].split() == [str(path) for path in pong_seeds]

    text = T.markdown(rows, T.check_runs(load_runs(pong_seeds)))
    cells = [cell.strip() for cell in text.splitlines()[2].split("|")[1:-1]]
    assert cells == ["pong", "pong_64", "3", "12.2 [-5.0 to 21.0]", "0.93 [0.44 to 1.18]",
                     "19.2 [18.0 to 20.5] (2 of 3 seeds)", "3.50 h [2.00 to 5.00] (2 of 3 seeds)",
                     "1.0 M [0.4 to 1.8]", "3.8 M [1.4 to 7.2]", "2.67 h [1.00 to 5.00]",
                     "20 (4 h)", "18 (1 h)", "17 (24 h)", "20 (8 h)"]
    assert "- Evaluation: paper protocol, 50 greedy games, 30 no-op starts" in text
    assert "are means of 50 greedy games" not in text  # the paper's protocol


def test_a_game_never_reached_another_config_and_the_papers_game_order(tmp_path, pong_seeds):
    boxing = write_run(tmp_path / "boxing", game="boxing", metrics_times=[3600],
                       evals=[(600, 10.0), (1800, 50.0), (3600, 90.0)])
    faster = write_run(tmp_path / "pong_lr" / "seed0", train={"lr": 2e-3}, eval=TARGET,
                       metrics_times=[600], evals=[(600, -21.0)])
    rows, _ = T.table_rows(load_runs([*pong_seeds, faster, boxing]))
    assert [(row["game"], row["config"]) for row in rows] == [
        ("boxing", "boxing"), ("pong", "pong_64: train.lr=0.001"),
        ("pong", "pong_lr/seed0: train.lr=0.002")]  # seed0 twice: named by parent
    text = T.markdown(rows, T.check_runs(load_runs([boxing])))
    cells = [cell.strip() for cell in text.splitlines()[2].split("|")[1:-1]]
    # 90 is the best; 50 at 0.5 h; 98 never reached; HNS (90 - 0.1) / 12
    assert cells[3:7] == ["90.0", "7.49", "50.0", "not reached"]
    assert cells[-4:] == ["98 (0.5 h)", "92 (2 h)", "-", "-"]
    assert (rows[0]["ba3c_score"], rows[0]["hours_to_paper_score_seeds"]) == (None, 0)


def test_a_protocol_other_than_the_papers_is_said(tmp_path):
    runs = load_runs([write_run(tmp_path / "r", eval={"episodes": 2}, metrics_times=[60],
                                evals=[(60, -21.0)])])
    text = T.markdown(T.table_rows(runs)[0], T.check_runs(runs))
    assert "paper protocol, 2 greedy games" in text
    assert "The paper's scores are means of 50 greedy games; these runs' are not." in text


@pytest.mark.parametrize("bad, message", [
    ({"game": "alien"}, r"r: env.id='alien' is not a game of the paper's Table 3 \(its "
                        r"games: beam_rider, boxing, breakout, pong, seaquest, space_invaders\)"),
    ({"eval": {"episodes": 30}}, r"runs of different evaluation protocols cannot share a "
                                 r"table: .*/ok \(paper protocol, 50 greedy games.*\) and "
                                 r".*/r \(paper protocol, 30 greedy games"),
    ({"config": False}, r"r: no config.yaml: its game and evaluation protocol are unknown"),
])
def test_bad_runs_are_refused_with_the_reason(tmp_path, bad, message):
    ok = write_run(tmp_path / "ok", metrics_times=[60])
    runs = load_runs([ok, write_run(tmp_path / "r", metrics_times=[60], **bad)])
    with pytest.raises(ValueError, match=message):
        T.check_runs(runs)


def test_table_command_writes_markdown_csv_and_a_figure(tmp_path, pong_seeds):
    boxing = write_run(tmp_path / "boxing", game="boxing", metrics_times=[60],
                       evals=[(60, 3.0)])
    out = tmp_path / "out"
    text, written = T.table_command([*pong_seeds, boxing], out)
    assert [path.name for path in written] == ["table.md", "table.png", "table.csv",
                                               "seeds.csv"]
    assert (out / "table.md").read_text() == text
    assert (out / "table.png").stat().st_size > 1000
    with open(out / "table.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(r["game"], r["seeds"], r["best_mean"], r["ba3c_score"]) for r in rows] == [
        ("boxing", "1", "3.0", ""), ("pong", "3", str(36.5 / 3), "17.0")]
    with open(out / "seeds.csv", newline="") as file:
        seeds = list(csv.DictReader(file))
    assert [(s["game"], s["seed"], s["at_paper_time"], s["hours_to_paper_score"])
            for s in seeds] == [("boxing", "0", "", ""), ("pong", "0", "18.0", "5.0"),
                                ("pong", "1", "20.5", "2.0"), ("pong", "2", "", "")]
    figure = T.table_figure(T.table_rows(load_runs([*pong_seeds, boxing]))[0])
    assert len(figure.axes) == 2
    bars = [bar for bar in figure.axes[1].patches if isinstance(bar, Rectangle)]
    assert [bar.get_height() for bar in bars] == [pytest.approx(36.5 / 3), 20, 18, 17, 20]
