"""Many ``dba3c bench scale`` points in one MPI job: the rank program
(``dba3c.benchmarks.scale.job``) and its memory release, and the driver's failure records,
relaunches and interrupts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from dba3c.benchmarks.proctree import Interrupt
from dba3c.benchmarks.scale import cluster as scale
from dba3c.benchmarks.scale.cluster import (
    PointPlan,
    job_runs,
    run_points,
)
from dba3c.benchmarks.scale.grid import ScalePoint
from dba3c.benchmarks.scale.job import job_event, read_job, write_job
from dba3c.errors import Interrupted
from dba3c.games.envs import env_spaces, spaces_key
from dba3c.launchers.local import find_mpiexec, launch_environment
from dba3c.preset import load_config
from tests.support import ROOT, read_jsonl
from tests.support.scale import plan

CONFIG = "configs/breakout.yaml"


# Run in a fresh interpreter, so glibc's mmap threshold starts at its default: a freed 16 MB
# array raises it, sixty 1.3 MB buffers (a PS's gradient buffers at 64 workers) then come
# from the heap, each pinned below a live 200 kB one, and are freed again.
HEAP_AFTER_A_POINT = """
import numpy as np
from dba3c.benchmarks.scale.job import release_memory
def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
np.ones(2_000_000).sum()
buffers, pins = [], []
for _ in range(60):
    buffers.append(np.ones(1_300_000 // 8))
    pins.append(np.ones(25_000))  # 200 kB, too big for any hole the imports left
del buffers
before = rss_mb()
release_memory()
print(before, rss_mb())
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_release_between_points_gives_freed_heap_buffers_back():
    proc = subprocess.run([sys.executable, "-c", HEAP_AFTER_A_POINT], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    before, after = map(float, proc.stdout.split())
    assert before - after > 60  # of the 78 MB freed; without malloc_trim RSS stays put


def marked_processes(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_one_job_plays_points_of_different_sizes_each_to_its_last_step(tmp_path):
    # 2 ranks, a collective point of 2 ranks (rank 2 sits out its Comm_split), 3 ranks, 3
    plans = [plan(1, 1), plan(2, 0), plan(2, 1), plan(1, 2)]
    run_dirs = [tmp_path / f"p{i}" for i in range(len(plans))]
    runs = job_runs(CONFIG, [], plans, 20.0, run_dirs)
    assert [r.ranks for r in runs] == [2, 2, 3, 3]
    cfg = load_config(CONFIG, [])
    spaces = [(spaces_key(cfg), env_spaces(cfg))]
    write_job(tmp_path / "job.json", runs, spaces)
    assert read_job(tmp_path / "job.json") == (runs, spaces)
    # the ranks take the env's spaces from the job file: a rank that opened a simulator
    # (30 MB of gymnasium and ale-py, which imports gymnasium) fails on this stand-in
    blocked = tmp_path / "blocked"
    (blocked / "gymnasium").mkdir(parents=True)
    (blocked / "gymnasium" / "__init__.py").write_text(
        "raise ImportError('a synthetic rank imported gymnasium')\n")
    marker = f"DBA3C_TEST_{uuid.uuid4().hex}"
    env = launch_environment()
    env["PYTHONPATH"] = os.pathsep.join([str(blocked), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([find_mpiexec(), "-n", "3", sys.executable, "-m",
                           "dba3c.benchmarks.scale.job", str(tmp_path / "job.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**env, marker: "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [e for e in map(job_event, proc.stdout.splitlines(keepends=True)) if e]
    assert events == [(kind, i) for i in range(4) for kind in ("start", "end")]
    for run_dir in run_dirs:
        assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == list(range(1, 13))
    assert marked_processes(marker) == []


def test_a_failing_point_is_recorded_and_the_points_after_it_run_in_a_new_job(monkeypatch):
    # the middle point's straggler takes 100 x 100 ms a step: the stall watchdog (3 s here)
    # ends that job; the driver records the point and runs the last one in a new job
    monkeypatch.setattr(scale, "STALL_TIMEOUT_S", 3.0)
    marker = f"DBA3C_TEST_{uuid.uuid4().hex}"
    monkeypatch.setenv(marker, "1")
    plans = [plan(1, 1), plan(2, 1, slow_workers=1, slow_factor=100.0), plan(1, 2)]
    seen: list[tuple[PointPlan, dict]] = []
    results = []
    todo = plans
    while todo:  # what run_scale does with a group
        ran = run_points(CONFIG, [], todo, compute_ms=20.0,
                         done=lambda p, r: seen.append((p, r)))
        results += ran
        todo = todo[len(ran):]
    assert [p for p, _ in seen] == plans and [r for _, r in seen] == results
    first, failed, last = results
    assert "error" not in first and "error" not in last
    assert failed["error"].startswith("job exited 1: ") and "no step for 3 s" in \
        failed["error"], failed["error"]
    assert (failed["workers"], failed["slow_factor"]) == (2, 100.0)
    for r in (first, last):
        assert 20.0 <= r["step_ms"] < 60.0, r  # T_c = 20 ms, E = T_c / step
        assert r["efficiency"] == pytest.approx(20.0 / r["step_ms"])
        assert r["steps"] == 12 and r["warmup_steps"] == 4
    assert set(last["peak_rss_mb"]) == {"chief", "ps"}
    assert marked_processes(marker) == []


def test_an_interrupt_ends_a_running_job_with_all_its_ranks(monkeypatch):
    marker = f"DBA3C_TEST_{uuid.uuid4().hex}"
    monkeypatch.setenv(marker, "1")
    seen: list[dict] = []
    # 40 steps of 1 s (T_c 20 ms x s 50): SIGINT comes 6 s after the start, mid-point
    with Interrupt() as interrupt:
        threading.Timer(6.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(Interrupted) as caught:
            run_points(CONFIG, [], [PointPlan(ScalePoint(2, 1), 50.0, 40, 3)], compute_ms=20.0,
                       interrupt=interrupt, done=lambda p, r: seen.append(r))
    assert caught.value.signum == signal.SIGINT and seen == []
    assert marked_processes(marker) == []
