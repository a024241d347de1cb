"""``dba3c bench --scale``'s driver (``dba3c.benchmarks.scale.cluster``): the arithmetic of its
measurements, the options it refuses, and real (small) synthetic runs whose step time must
follow the compute time and the stragglers."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest

from dba3c.benchmarks.emulated import emulation_problem
from dba3c.benchmarks.scale.cluster import (
    PointPlan,
    busy_fraction,
    cpu_times,
    logged_steps,
    peak_by_role,
    run_point,
    steady_step_seconds,
    timeout_message,
)
from dba3c.benchmarks.scale.grid import ScalePoint

from conftest import dba3c
from test_scale_model import collective


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

    log_dir = tmp_path / "log"
    rc = main(["bench", *argv, "--out", str(tmp_path / "bench" / "results.json"),
               "--log", "--log-dir", str(log_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"error: {message}"), err
    assert err.count("\n") == 1 and not log_dir.exists() and not (tmp_path / "bench").exists()


def test_the_emulated_cluster_needs_root(monkeypatch):
    from dba3c.benchmarks import emulated

    assert emulation_problem() is None  # the tests run as root where namespaces work
    monkeypatch.setattr(emulated.os, "geteuid", lambda: 1000)
    assert emulation_problem() == "uid 1000 is not root (network namespaces need root)"


def test_bench_scale_refuses_without_root_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from dba3c.benchmarks import emulated
    from dba3c.cli import main

    monkeypatch.setattr(emulated.os, "geteuid", lambda: 1000)
    log_dir = tmp_path / "log"
    rc = main(["bench", "--scale", "--quick", "--out", str(tmp_path / "bench" / "results.json"),
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
    log_dir = tmp_path / "log"
    rc = main(["bench", "--scale", "--quick", "--out", str(tmp_path / "b" / "results.json"),
               "--log", "--log-dir", str(log_dir)])
    err = capsys.readouterr().err
    partial = tmp_path / "b" / "scale.partial.json"
    assert rc == 143, err
    assert err.endswith(f"\nerror: interrupted; 2 points measured kept in {partial}\n"), err
    assert "Traceback" not in err and not log_dir.exists()
    assert [(p["workers"], p["ps"]) for p in json.loads(partial.read_text())["points"]] == [
        (1, 1), (1, 4)]
    assert trees[-1] == "stopped" and not trees[2].pids()  # the cluster stopped, tree ended
    assert signal.getsignal(signal.SIGTERM) is before
