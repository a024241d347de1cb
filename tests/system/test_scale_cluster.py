"""``dba3c bench scale``'s driver (``dba3c.benchmarks.scale.cluster``) with real processes:
the options it refuses, real (small) synthetic runs whose step time must follow the compute
time and the stragglers, a point's time limit and an interrupt that end its process tree,
and the emulated cluster's root check."""

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
    run_point,
)
from dba3c.benchmarks.scale.grid import ScalePoint
from tests.support import dba3c
from tests.support.scale import collective


def test_the_emulated_cluster_needs_root(monkeypatch):
    from dba3c.benchmarks import emulated

    assert emulation_problem() is None  # the tests run as root where namespaces work
    monkeypatch.setattr(emulated.os, "geteuid", lambda: 1000)
    assert emulation_problem() == "uid 1000 is not root (network namespaces need root)"


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
    for args, expected in [(["scale", "--seconds", "5"], "unrecognized arguments: --seconds"),
                           (["scale", "--compute-ms", "0"], "--compute-ms 0 must be"),
                           (["scale", "--time-scale", "0.5"], "--time-scale 0.5 must be"),
                           (["scale", "--point-timeout", "0"], "--point-timeout 0 must be a "
                                                               "positive number of seconds"),
                           (["scale", "--point-timeout", "nan"], "--point-timeout nan must"),
                           (["node", "--point-timeout", "5"],
                            "unrecognized arguments: --point-timeout")]:
        proc = dba3c("bench", *args, check=False, timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and \
            expected in proc.stderr, proc.stderr


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

    trees: list[proctree.ProcessTree | str | None] = []  # per point a tree or None; "stopped"

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
    rc = main(["bench", "scale", "--quick", "--out", str(tmp_path / "b" / "scale.json"),
               "--log", "--log-dir", str(log_dir)])
    err = capsys.readouterr().err
    partial = tmp_path / "b" / "scale.partial.json"
    assert rc == 143, err
    assert err.endswith(f"\nerror: interrupted; 2 points measured kept in {partial}\n"), err
    assert "Traceback" not in err and not log_dir.exists()
    assert [(p["workers"], p["ps"]) for p in json.loads(partial.read_text())["points"]] == [
        (1, 1), (1, 4)]
    tree = trees[2]
    assert isinstance(tree, proctree.ProcessTree)
    assert trees[-1] == "stopped" and not tree.pids()  # the cluster stopped, tree ended
    assert signal.getsignal(signal.SIGTERM) is before
