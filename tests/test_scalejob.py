"""Many ``dba3c bench --scale`` points in one MPI job: the rank program
(``dba3c.benchmarks.scale.job``), the transport view it plays each point on, and the driver's
grouping, failure records and relaunches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dba3c.benchmarks.proctree import TIMED_OUT, Interrupt
from dba3c.benchmarks.scale import cluster as scale
from dba3c.benchmarks.scale.cluster import (
    PointPlan,
    job_failure,
    job_groups,
    job_runs,
    peak_by_role,
    run_points,
    unfinished,
)
from dba3c.benchmarks.scale.grid import ScalePoint
from dba3c.benchmarks.scale.job import event_line, job_event, read_job, write_job
from dba3c.distributed.collective.ranks import sit_out_collective_run
from dba3c.distributed.transport import InProcessTransport, TransportView
from dba3c.errors import Interrupted
from dba3c.games.envs import env_spaces, spaces_key
from dba3c.launchers.local import find_mpiexec, launch_environment
from dba3c.preset import load_config

from conftest import ROOT, read_jsonl

CONFIG = "configs/breakout.yaml"


def plan(workers: int, ps: int, link: int = 10, **kw) -> PointPlan:
    """A point at s = 5 (T_c 20 ms -> 100 ms a step), 12 steps, 4 of them warm-up."""
    aggregation = "collective" if ps == 0 else "ps"
    return PointPlan(ScalePoint(workers, ps, link_gbit=link, aggregation=aggregation, **kw),
                     5.0, 12, 4)


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


def test_rank_zero_lines_name_the_point_and_nothing_else_matches():
    assert event_line("start", 12) == "dba3c-scalejob start 12\n"
    assert job_event(event_line("start", 12)) == ("start", 12)
    assert job_event(event_line("end", 0)) == ("end", 0)
    for other in ["dba3c-scalejob start x\n", "dba3c-scalejob stop 1\n", "run finished\n",
                  "dba3c-scalejob start 1 2\n", ""]:
        assert job_event(other) is None, other


def test_peak_rss_leaves_out_the_ranks_that_sat_the_point_out():
    peaks = {"rank0": 110.0, "rank1": 90.0, "rank2": 95.0, "rank3": 180.0}
    assert peak_by_role(peaks, num_ps=1, num_ranks=3) == {"chief": 110.0, "ps": 90.0,
                                                          "worker": 95.0}


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


def test_a_view_moves_tags_per_run_and_shares_the_world_split():
    world = InProcessTransport.create_world(3)
    first = [TransportView(world[r], 2, run=0) for r in (0, 1)]
    second = [TransportView(world[r], 2, run=1) for r in (0, 1)]
    assert (second[1].rank, second[1].size) == (1, 2)
    with pytest.raises(ValueError, match="rank 2 of a world of 3 is not in a view"):
        TransportView(world[2], 2, run=0)
    with pytest.raises(ValueError, match="tag 16 is outside"):
        first[0].isend(np.zeros(1), 1, 16)
    # run 0 leaves a message unreceived; run 1's receive with the same tag does not take it
    first[0].isend(np.array([7.0]), 1, 2)
    second[0].isend(np.array([8.0]), 1, 2)
    got = np.zeros(1)
    assert second[1].irecv(got, 0, 2).test() and got[0] == 8.0
    stale = np.zeros(1)
    assert world[1].irecv(stale, 0, 2).test() and stale[0] == 7.0  # run 0's tag, unmoved
    # a collective run of 2 ranks in a world of 3: rank 2 sits it out in the same split
    groups: dict[int, Any] = {}

    def member(rank: int) -> None:
        groups[rank] = second[rank].split(True)

    threads = [threading.Thread(target=member, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    sit_out_collective_run(world[2])
    for t in threads:
        t.join(timeout=10)
    assert sorted(groups) == [0, 1]
    assert [(g.rank, g.size) for g in (groups[0], groups[1])] == [(0, 2), (1, 2)]


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
