"""Synthetic-compute ranks and the stall watchdog.

- Synthetic ranks: the config refuses what they cannot do; a 16-worker, 4-PS run through
  ``dba3c launch`` ends at exactly ``train.max_steps`` with parameters equal to Adam applied
  (here, independently) to the mean of the seeded gradients, imports no TensorFlow in any
  rank and stays under 150 MB of peak RSS per process.
- Stall watchdog: the pure bookkeeping, and real runs in which one rank is SIGSTOPped (it
  stops answering without dying): the job ends non-zero within stall_timeout + 30 s with
  one error line naming that rank.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from dba3c.distributed.ps.chief_link import ChiefLink
from dba3c.distributed.ps.client import RemoteParameterClient
from dba3c.distributed.ps.server import run_ps
from dba3c.distributed.roles import make_roles
from dba3c.distributed.synthetic import (
    SyntheticWorker,
    slow_ranks,
    stage_seconds,
    step_seconds,
    synthetic_gradient,
)
from dba3c.distributed.transport import InProcessTransport, Poller, wait_until
from dba3c.distributed.watchdog import StallClock, query_lead, stalled_ranks
from dba3c.errors import TrainingError
from dba3c.learning.models import NetSpec
from dba3c.learning.params import layer_buckets
from dba3c.learning.rules import OptimizerState
from dba3c.preset import from_dict

from conftest import ROOT, dba3c, latest_checkpoint, read_jsonl
from test_protocol import FakeChief, N, grad_of, make_cfg, send_final_report
from test_reliability import Job, descendants, error_lines, wait_for_steps

SYN = ["synthetic.enabled=true", "eval.every=0", "eval.rank=false", "run.progress=none"]


# ---- configuration and the pure pieces ------------------------------------------------------
@pytest.mark.parametrize("args, expected", [
    (["train", "configs/breakout.yaml", "synthetic.enabled=true"],
     "eval.every=1000 needs a network, and synthetic.enabled=true runs none"),
    (["train", "configs/breakout_64.yaml", "synthetic.enabled=true", "eval.every=0"],
     "eval.rank=true: synthetic.enabled=true runs no evaluator rank"),
    (["train", "configs/breakout.yaml", *SYN, "dist.workers=2", "synthetic.slow_workers=3"],
     "synthetic.slow_workers=3 must be <= dist.workers=2"),
    (["train", "configs/breakout.yaml", *SYN, "synthetic.slow_factor=0.5"],
     "synthetic.slow_factor=0.5 must be a number in [1, inf]"),
    (["train", "configs/breakout.yaml", *SYN],  # one process has no parameter servers
     "synthetic.enabled=true needs parameter-server ranks"),
    (["launch", "configs/breakout.yaml", "--workers", "2", *SYN, "dist.stall_timeout=-1"],
     "dist.stall_timeout=-1 must be a number in [0, inf]"),
])
def test_bad_synthetic_settings_are_refused_with_one_line(tmp_path, args, expected):
    run = tmp_path / "run"
    proc = dba3c(*args, f"run.dir={run}", check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert not run.exists()


def test_more_slow_workers_than_the_world_gives_are_refused_by_the_config_rule(tmp_path):
    # no dist.workers: the ranks learn the number of workers from the world size and check
    # the config again with it (after mpiexec's own "launch:" line)
    proc = dba3c("launch", "configs/breakout.yaml", "--workers", "2", *SYN,
                 "synthetic.slow_workers=3", f"run.dir={tmp_path / 'run'}", check=False,
                 timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert errors == ["error: synthetic.slow_workers=3 must be <= dist.workers=2"]
    assert not (tmp_path / "run").exists()


def test_synthetic_gradient_is_seeded_small_and_per_rank_and_step():
    g = synthetic_gradient(1000, 3, 5, 7)
    assert g.dtype == np.float32 and g.shape == (1000,)
    assert np.array_equal(g, synthetic_gradient(1000, 3, 5, 7))
    assert not np.array_equal(g, synthetic_gradient(1000, 3, 6, 7))
    assert not np.array_equal(g, synthetic_gradient(1000, 3, 5, 8))
    assert 0.8e-3 < float(np.std(g)) < 1.2e-3 and abs(float(np.mean(g))) < 2e-4


def test_step_time_scales_with_stragglers_and_jitter_is_seeded_exponential():
    assert step_seconds(250.0, 0.0, 1.0, (0, 1, 2)) == 0.25
    assert step_seconds(250.0, 0.0, 3.0, (0, 1, 2)) == 0.75
    times = np.array([step_seconds(100.0, 0.5, 1.0, (0, 1, v)) for v in range(4000)])
    assert times.min() >= 0.1  # never faster than the configured compute time
    # 0.1 * (1 + 0.5 * E), E ~ Exp(1): mean 0.15, standard deviation 0.05
    assert abs(times.mean() - 0.15) < 0.005 and abs(times.std() - 0.05) < 0.005
    assert step_seconds(100.0, 0.5, 1.0, (0, 1, 9)) == step_seconds(100.0, 0.5, 1.0, (0, 1, 9))
    assert slow_ranks((0, 3, 4, 5), 2) == (4, 5) and slow_ranks((0, 3), 0) == ()


def test_stall_clock_queries_once_before_the_timeout_and_restarts_on_progress():
    clock = StallClock(10.0, since=100.0)
    assert query_lead(10.0) == 5.0 and query_lead(4.0) == 2.0
    assert not clock.query_due(104.9) and clock.query_due(105.0)
    assert not clock.query_due(106.0)  # once per stall
    assert not clock.expired(109.9) and clock.expired(110.0)
    clock.progress(111.0)
    assert not clock.expired(120.9) and clock.query_due(116.0) and clock.expired(121.0)
    off = StallClock(0.0, since=0.0)
    assert not off.query_due(1e9) and not off.expired(1e9)


def test_stalled_ranks_names_silent_servers_and_missing_gradients_of_the_lowest_step():
    workers = (0, 4, 5, 6)
    # ps 2 is at step 8 still lacking 5 and 6; ps 1 already moved on; ps 3 is silent
    ranks, why = stalled_ranks(workers, (1, 2, 3), {1: (9, set()), 2: (8, {0, 4})}, {3: 8})
    assert ranks == [3, 5, 6]
    assert "parameter servers [3] do not answer" in why
    assert "workers [5, 6]: no gradient for step 8" in why
    assert stalled_ranks(workers, (1,), {1: (3, {0, 4, 6})}, {1: 3}) == (
        [5], "workers [5]: no gradient for step 3")
    # ps 2 fell silent at step 4; ps 1 finished step 4 and waits for workers that wait for
    # ps 2's parameters: only ps 2 is named
    assert stalled_ranks(workers, (1, 2), {1: (5, set())}, {1: 5, 2: 4}) == (
        [2], "parameter servers [2] do not answer")
    assert stalled_ranks(workers, (1, 2), {}, {})[0] == [1, 2]


def stall_in_process(worker_fn, max_steps: int) -> tuple[str, float]:
    """Chief 0 (not training), ps 1-2, workers 3-4 as threads, dist.stall_timeout 1 s;
    ``worker_fn(rank, client, transport)`` plays each worker. The chief's error message and
    the seconds it took to come."""
    cfg = make_cfg(workers=2, ps=2, max_steps=max_steps, stall_timeout=1.0)
    roles = make_roles(5, cfg)
    transports = InProcessTransport.create_world(5)
    t0 = time.monotonic()  # the watchdog's clock starts with the link
    link = ChiefLink(transports[0], roles, cfg, FakeChief(), N)
    link.send_init(0, np.zeros(N, np.float32), OptimizerState.zeros(N))

    def until_aborted(fn, *args) -> None:
        try:
            fn(*args)
        except RuntimeError as e:  # the end of the test's world, anything else fails it
            if "aborted" not in str(e):
                raise

    threads = [threading.Thread(target=until_aborted, args=(run_ps, transports[p], roles,
                                                             cfg, N)) for p in roles.ps]
    threads += [threading.Thread(target=until_aborted, args=(
        worker_fn, w, RemoteParameterClient(transports[w], roles, cfg, N), transports[w]))
        for w in roles.workers]
    for thread in threads:
        thread.daemon = True
        thread.start()
    with pytest.raises(TrainingError) as stalled:
        wait_until(lambda: link.poll() or time.monotonic() - t0 > 30)
    took = time.monotonic() - t0
    with pytest.raises(RuntimeError, match="aborted"):  # ends the other threads
        transports[0].abort(1)
    for thread in threads:
        thread.join(timeout=10)
    return str(stalled.value), took


def test_the_chief_names_a_worker_whose_gradient_never_comes_in_process():
    def worker(rank, client, _transport):  # worker 4 pulls, then hangs
        params = client.pull()
        while rank == 3 and params is not None:
            params = client.push(params.version, grad_of(rank, params.version))

    error, took = stall_in_process(worker, max_steps=1000)
    assert error == ("no step for 1 s, waiting on ranks [4] (workers [4]: no gradient for "
                     "step 0; dist.stall_timeout=1)")
    assert 1.0 <= took < 5.0


def test_the_chief_names_a_worker_that_never_says_goodbye_in_process():
    def worker(rank, client, transport):  # both train to the end; only worker 3 reports
        params = client.pull()
        while params is not None:
            params = client.push(params.version, grad_of(rank, params.version))
        if rank == 3:
            send_final_report(transport, rank)
            client.close()

    error, took = stall_in_process(worker, max_steps=3)
    assert error == ("no step for 1 s, waiting on ranks [4] (no final report from [4]; "
                     "dist.stall_timeout=1)")
    assert 1.0 <= took < 5.0


# ---- a synthetic run at scale -------------------------------------------------------------
NUM_WORKERS, NUM_PS, STEPS, SEED = 16, 4, 12, 3
TF_IMPORT = re.compile(r"\|\s*tensorflow(\.\S+)?$")  # importtime lines of real TensorFlow


def reference_theta(theta0: np.ndarray, workers: list[int], steps: int) -> np.ndarray:
    """Adam (beta1 0.8, beta2 0.75, epsilon 1e-8, lr 1e-3; float64 here) on the mean of the
    gradients of ``workers``: 1e-3 x standard normals seeded by (seed, rank, step)."""
    return reference_run(theta0, lambda _step: workers, steps)


def reference_run(theta0: np.ndarray, workers_at: Callable[[int], Sequence[int]],
                  steps: int) -> np.ndarray:
    """:func:`reference_theta` with the workers of each step given by ``workers_at(version)``
    (the ranks differ between aggregation modes); an empty list is a skipped step (a
    non-finite gradient): no update, and Adam's step count does not advance."""
    theta, m, v, t = theta0.astype(np.float64), 0.0, 0.0, 0
    for version in range(steps):
        workers = workers_at(version)
        if not workers:
            continue
        t += 1
        g = np.mean([np.random.default_rng([SEED, w, version]).standard_normal(
            theta.size, np.float32) * np.float32(1e-3) for w in workers], axis=0,
            dtype=np.float64)
        m = 0.8 * m + 0.2 * g
        v = 0.75 * v + 0.25 * g * g
        alpha = 1e-3 * np.sqrt(1 - 0.75 ** t) / (1 - 0.8 ** t)
        theta = theta - alpha * m / (np.sqrt(v) + 1e-8)
    return theta


def test_sixteen_synthetic_workers_and_four_ps_run_exact_steps_without_tensorflow(tmp_path):
    run = tmp_path / "run"
    launch = [sys.executable, "-m", "dba3c", "launch", "configs/breakout_64.yaml",
              "--workers", NUM_WORKERS, "--ps", NUM_PS, *SYN, "synthetic.compute_ms=50",
              f"train.max_steps={STEPS}", f"run.seed={SEED}", "run.checkpoint_every=5",
              "run.log_every=1", f"run.dir={run}"]
    # the peak RSS of every process below the wrapper (ranks, mpiexec, the launcher) is the
    # wrapper's RUSAGE_CHILDREN maximum: each level waits for its children
    wrapper = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", wrapper, *map(str, launch)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPROFILEIMPORTTIME="1"))
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    world = NUM_WORKERS + NUM_PS
    # every rank reached the protocol (imported it), none imported TensorFlow
    assert len(re.findall(r"\|\s*dba3c\.distributed\.run$", proc.stderr, re.MULTILINE)) == world
    assert not [line for line in proc.stderr.splitlines() if TF_IMPORT.search(line)]
    peak_mb = int(proc.stdout.split()[-1]) / 1024
    print(f"{world} ranks: {wall:.0f} s, peak RSS of the largest process {peak_mb:.0f} MB")
    assert peak_mb <= 150

    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_step"] == STEPS and "max_steps" in summary["stop_reason"]
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    last = read_jsonl(run / "metrics.jsonl")[-1]
    assert last["dist/replicas"] == NUM_WORKERS and last["perf/effective_batch"] == 512
    ckpt = latest_checkpoint(run)
    assert ckpt.step == STEPS and ckpt.adam_count == STEPS
    spec = NetSpec("ba3c", 128, (4, 84, 84), 4)  # Breakout: 4 actions
    workers = [0, *range(1 + NUM_PS, world)]  # the chief trains
    expected = reference_theta(spec.init_params(SEED), workers, STEPS)
    np.testing.assert_allclose(ckpt.theta, expected, rtol=1e-5, atol=1e-6)


# ---- the stall watchdog on real runs ------------------------------------------------------
def rank_pid(job: Job, rank: int) -> int:
    """The pid of MPI rank ``rank`` of a job (PMI_RANK in its environment)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in descendants(job.proc.pid):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"PMI_RANK={rank}".encode() in environ:
                return pid
        time.sleep(0.2)
    raise AssertionError(f"rank {rank} not found")


def stall_error(args: list, run: Path, stopped: int, timeout: float) -> str:
    """Run ``dba3c ARGS`` (``dist.stall_timeout=TIMEOUT``, ``run.dir=RUN``) until 3 steps are
    logged, then SIGSTOP rank ``stopped``: the job ends non-zero within ``timeout`` + 30 s
    with exactly one error line, which says no step came for the timeout; returns it."""
    with Job(*args, "run.log_every=1", f"dist.stall_timeout={timeout}",
             f"run.dir={run}") as job:
        wait_for_steps(run, job, 3)
        pid = rank_pid(job, stopped)
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            rc = job.wait(timeout=timeout + 60)
        finally:
            if pid in job.survivors():
                os.kill(pid, signal.SIGKILL)
        took = job.ended - t0
    assert rc != 0
    errors = error_lines(job.output)
    assert len(errors) == 1, job.output[-3000:]
    assert f"no step for {timeout} s, waiting on ranks [{stopped}]" in errors[0], errors
    assert timeout <= took < timeout + 30, took
    return errors[0]


@pytest.mark.parametrize("stopped, role", [(4, "worker"), (2, "ps")])
def test_a_rank_that_stops_answering_ends_the_job_naming_it(tmp_path, stopped, role):
    # chief + worker 0, ps 1-2, workers 3-4
    error = stall_error(["launch", "configs/breakout.yaml", "--workers", 3, "--ps", 2, *SYN,
                         "synthetic.compute_ms=20", "train.max_steps=1000000",
                         "run.checkpoint_every=0"], tmp_path / "run", stopped, timeout=5)
    assert ("do not answer" if role == "ps" else "no gradient for step") in error


def test_stage_seconds_split_a_step_by_forward_flops_by_hand():
    # F = (1, 2, 3): forward 1, 2, 3; backward 1 (stage 0), 4, 6; D = 17
    forward, backward = stage_seconds(1.7, [1, 2, 3])
    np.testing.assert_allclose(forward, [0.1, 0.2, 0.3])
    np.testing.assert_allclose(backward, [0.1, 0.4, 0.6])


def test_a_staged_synthetic_step_hands_out_the_seeded_gradient_last_bucket_first():
    spec = NetSpec("ba3c", 128, (4, 84, 84), 4)
    cfg = from_dict({**make_cfg(workers=1, ps=1).to_dict(),
                     "synthetic": {"enabled": True, "compute_ms": 20.0}})
    worker = SyntheticWorker(cfg, 0, spec, (0,))
    starts = layer_buckets(spec.layout())
    calls: list[tuple] = []
    t0 = time.perf_counter()
    worker.compute_staged_gradient((worker.next_batch(7), lambda b: calls.append(("fwd", b)),
                                    lambda b, g: calls.append(("bwd", b, g.copy()))), 7)
    elapsed = time.perf_counter() - t0
    B = len(starts)
    assert [c[:2] for c in calls] == ([("fwd", b) for b in range(B)]
                                      + [("bwd", b) for b in reversed(range(B))])
    grad = synthetic_gradient(spec.layout().num_params, cfg.run.seed, 0, 7)
    handed = {c[1]: c[2] for c in calls if c[0] == "bwd"}
    np.testing.assert_array_equal(np.concatenate([handed[b] for b in range(B)]), grad)
    assert elapsed >= 0.020  # the modelled compute time passes (sleeps end no earlier)


def test_a_poller_polls_while_open_and_not_after():
    count = [0]
    with Poller(lambda: count.__setitem__(0, count[0] + 1), 0.001):
        wait_until(lambda: count[0] >= 3)
    after = count[0]
    time.sleep(0.01)
    assert count[0] == after


def test_wait_until_polls_quickly_at_first_then_backs_off(monkeypatch):
    import dba3c.distributed.transport as transport

    clock, sleeps = [0.0], []

    def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(transport.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(transport.time, "sleep", fake_sleep)
    polls = iter(range(10))
    transport.wait_until(lambda: next(polls) == 9, max_sleep_s=4e-4, quick_s=3e-5,
                         quick_sleep_s=1e-5)
    # 3 quick sleeps of 10 us fill the first 30 us; then 50 us doubling to the 400 us cap
    np.testing.assert_allclose(sleeps, [1e-5] * 3 + [5e-5, 1e-4, 2e-4, 4e-4, 4e-4, 4e-4])
