"""``dba3c bench scale``'s driver (``dba3c.benchmarks.scale.cluster``), in-process: the
arithmetic of its measurements, the options it refuses (and the other benches refuse), and
its grouping of points into jobs and its failure records."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dba3c.benchmarks.proctree import TIMED_OUT
from dba3c.benchmarks.scale.cluster import (
    PointPlan,
    busy_fraction,
    cpu_times,
    job_failure,
    job_groups,
    logged_steps,
    peak_by_role,
    steady_step_seconds,
    timeout_message,
    unfinished,
)
from dba3c.benchmarks.scale.grid import ScalePoint
from tests.support.scale import plan


@pytest.mark.parametrize("argv, message", [
    (["scale", "--workers", "4,x"], "argument --workers: '4,x' is not a comma-separated "
                                    "list of positive counts (e.g. 32,64)"),
    (["scale", "--ps", "0"], "argument --ps: '0' is not a comma-separated "
                             "list of positive counts (e.g. 32,64)"),
    # the grid's filters are scale's alone
    (["node", "--workers", "64"], "unrecognized arguments: --workers"),
    (["profile", "--ps", "4"], "unrecognized arguments: --ps"),
    (["long", "--links", "10"], "unrecognized arguments: --links"),
    (["node", "--hidden", "128"], "unrecognized arguments: --hidden"),
    (["scale", "--quick", "--workers", "64"], "--workers 64: the grid has no such point "
                                              "(its values: 1,4,16)"),
    (["scale", "--quick", "--hidden", "64"], "--hidden 64: the grid has no such point "
                                             "(its values: 32,128,512)"),
])
def test_bench_point_filters_refuse_bad_counts_before_any_work(argv, message, tmp_path, capsys):
    from dba3c.cli import main

    log_dir = tmp_path / "log"
    rc = main(["bench", *argv, "--out", str(tmp_path / "bench" / "results.json"),
               "--log", "--log-dir", str(log_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"error: {message}"), err
    assert err.count("\n") == 1 and not log_dir.exists() and not (tmp_path / "bench").exists()


def test_bench_scale_refuses_without_root_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from dba3c.benchmarks import emulated
    from dba3c.cli import main

    monkeypatch.setattr(emulated.os, "geteuid", lambda: 1000)
    log_dir = tmp_path / "log"
    rc = main(["bench", "scale", "--quick", "--out", str(tmp_path / "bench" / "results.json"),
               "--log", "--log-dir", str(log_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and err == ("error: the emulated cluster cannot start here: uid 1000 is not "
                               "root (network namespaces need root)\n"), err
    assert not log_dir.exists() and not (tmp_path / "bench").exists()


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


def test_a_timed_out_point_says_how_far_it_got():
    assert logged_steps([]) == 0
    assert logged_steps([{"step": 1}, {"step": 2}, {"step": 4}]) == 4
    assert timeout_message(300.0, 4, 12) == "timed out after 300 s (4 of 12 steps logged)"
    assert timeout_message(7.5, 0, 10) == "timed out after 7.5 s (0 of 10 steps logged)"


def test_consecutive_points_of_one_link_rate_make_one_job():
    plans = [plan(1, 1), plan(4, 1), plan(4, 4, link=100), plan(16, 4, link=100), plan(64, 4),
             plan(2, 0)]
    assert job_groups(plans) == [plans[:2], plans[2:4], plans[4:]]
    assert job_groups([]) == []
    assert job_groups(plans[:1]) == [plans[:1]]
    # the same link at another time scale is another shaped rate: another job
    slower = [plans[0], replace(plans[1], time_scale=20.0), plans[4]]
    assert job_groups(slower) == [[slower[0]], [slower[1]], [slower[2]]]


def test_a_job_that_stops_in_a_point_leaves_the_points_after_it_to_the_next():
    points = ["a", "b", "c", "d"]
    assert unfinished(points, 4) == (None, [])  # every point ended
    assert unfinished(points, 1) == ("b", ["c", "d"])  # b was running: failed, c d relaunched
    assert unfinished(points, 0) == ("a", ["b", "c", "d"])  # died before a ended
    assert unfinished(points, 3) == ("d", [])
    assert job_failure(TIMED_OUT, -9, "ignored", 300.0, 4, 12) == \
        "timed out after 300 s (4 of 12 steps logged)"
    assert job_failure("exited", 1, "error: rank 3: no step\n", 300.0, 4, 12) == \
        "job exited 1: error: rank 3: no step\n"


def test_peak_rss_leaves_out_the_ranks_that_sat_the_point_out():
    peaks = {"rank0": 110.0, "rank1": 90.0, "rank2": 95.0, "rank3": 180.0}
    assert peak_by_role(peaks, num_ps=1, num_ranks=3) == {"chief": 110.0, "ps": 90.0,
                                                          "worker": 95.0}
