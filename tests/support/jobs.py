"""Real jobs (``python -m dba3c ...`` children) and their processes: a job's output with
arrival times, the processes it started, a signal to it, a stalled rank; what a stopped or
resumed run leaves behind; the float64 reference of a synthetic run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from dba3c.training import checkpoint
from tests.support import ROOT, read_jsonl


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every live (non-zombie) process."""
    table = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                comm, rest = (proc / "stat").read_text().rsplit(")", 1)
            except OSError:
                continue
            fields = rest.split()
            if fields[0] != "Z":
                table[int(proc.name)] = (int(fields[1]), comm.split("(", 1)[1])
    return table


def descendants(pid: int) -> dict[int, str]:
    """pid -> command name of every live process below ``pid``."""
    table, found, frontier = process_table(), {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, comm) in table.items():
            if ppid == parent and child not in found:
                found[child] = comm
                frontier.append(child)
    return found


class Job:
    """A ``python -m dba3c ...`` child in its own session. Its combined output is collected
    line by line with arrival times (so the moment of a message can be measured), and the
    processes it starts are recorded while it runs: mpiexec puts the ranks in sessions of
    their own, so only this record finds ranks that outlive their launcher."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dba3c", *map(str, args)], cwd=ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self.ended: float | None = None  # when the process exited
        self.seen: dict[int, str] = {}  # every descendant process observed
        self._threads = [threading.Thread(target=f, daemon=True)
                         for f in (self._read, self._watch)]
        for thread in self._threads:
            thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None  # a pipe
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def _watch(self) -> None:
        while self.proc.poll() is None:
            self.seen.update(descendants(self.proc.pid))
            time.sleep(0.5)

    @property
    def output(self) -> str:
        """Everything printed so far."""
        return "\n".join(line for _, line in self.lines)

    def first_time(self, fragment: str) -> float | None:
        """When a line containing ``fragment`` was printed (None if never)."""
        return next((t for t, line in self.lines if fragment in line), None)

    def child(self, name: str) -> int:
        """The pid of the direct child process called ``name`` (e.g. mpiexec)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for pid, (ppid, comm) in process_table().items():
                if ppid == self.proc.pid and comm.startswith(name):
                    return pid
            time.sleep(0.1)
        raise AssertionError(f"no {name} under the launcher")

    def survivors(self) -> dict[int, str]:
        """Processes this job started that are still alive."""
        table = process_table()
        return {pid: comm for pid, comm in self.seen.items()
                if pid in table and table[pid][1] == comm}

    def wait(self, timeout: float) -> int:
        """The exit code; fails the test (killing everything) after ``timeout`` s."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"still running after {timeout} s:\n{self.output[-3000:]}") from None
        self.ended = time.monotonic()
        for thread in self._threads:
            thread.join(timeout=10)
        return rc

    def kill(self) -> None:
        """SIGKILL the job's session and every process it was seen to start."""
        for pid in self.survivors():
            os.kill(pid, signal.SIGKILL)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None or self.survivors():
            self.kill()


def wait_for_steps(run_dir: Path, job: Job, steps: int, timeout: float = 120) -> None:
    """Block until metrics.jsonl reports ``steps`` logged steps."""
    deadline = time.monotonic() + timeout
    path = run_dir / "metrics.jsonl"
    while not path.exists() or len(path.read_text().splitlines()) < steps:
        assert job.proc.poll() is None, f"run ended early:\n{job.output[-3000:]}"
        assert time.monotonic() < deadline, f"no progress:\n{job.output[-3000:]}"
        time.sleep(0.2)


def stop_with_signal(job: Job, pid: int, sig: signal.Signals, timeout: float) -> int:
    """Send ``sig`` to ``pid``; the job's exit code, which must come within ``timeout`` s."""
    os.kill(pid, sig)
    t0 = time.monotonic()
    rc = job.wait(timeout=timeout + 30)
    assert job.ended is not None
    assert job.ended - t0 < timeout, f"took {job.ended - t0:.1f} s to stop"
    return rc


def ckpt_steps(run_dir: Path) -> list[int]:
    """Steps of the checkpoint files of a run, ascending."""
    return sorted(int(p.name[5:15]) for p in (run_dir / "checkpoints").glob("step-*.ckpt"))


def assert_identical(a: checkpoint.Checkpoint, b: checkpoint.Checkpoint) -> None:
    """Same step, parameters and Adam state, bit for bit."""
    assert (a.step, a.adam_count) == (b.step, b.adam_count)
    for name in ("theta", "adam_m", "adam_v"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == np.float32 and x.shape == y.shape
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"{name} differs"


def summary(run_dir: Path) -> dict:
    """The run's summary.json."""
    return json.loads((run_dir / "summary.json").read_text())


def error_lines(text: str) -> list[str]:
    """The lines that start with ``error:``."""
    return [line for line in text.splitlines() if line.startswith("error:")]


# ---- a signal stops a distributed run cleanly ---------------------------------------------
def assert_stopped_by_signal(job: Job, run: Path, sig: signal.Signals) -> int:
    """After a distributed job stopped on ``sig``: no process left, the summary names the
    signal, the only checkpoint is at the final step and the metrics have every step up to
    it. Returns that step."""
    time.sleep(0.5)
    assert not job.survivors(), f"left running: {job.survivors()}"
    s = summary(run)["final_step"]
    assert summary(run)["stop_reason"] == f"signal {sig.name}", job.output[-3000:]
    assert ckpt_steps(run) == [s]
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, s + 1))
    return s


# synthetic-compute ranks (no TensorFlow): quiet, no evaluation
SYN = ["synthetic.enabled=true", "eval.every=0", "eval.rank=false", "run.progress=none"]
SEED = 3  # run.seed of the synthetic runs compared with reference_run


def reference_run(theta0: np.ndarray, workers_at: Callable[[int], Sequence[int]],
                  steps: int) -> np.ndarray:
    """Adam (beta1 0.8, beta2 0.75, epsilon 1e-8, lr 1e-3; float64 here) on the mean of the
    gradients of the workers of each step, ``workers_at(version)`` (the ranks differ between
    aggregation modes): 1e-3 x standard normals seeded by (SEED, rank, step). An empty list
    is a skipped step (a non-finite gradient): no update, and Adam's step count does not
    advance."""
    theta, t = theta0.astype(np.float64), 0
    m: np.ndarray | float = 0.0
    v: np.ndarray | float = 0.0
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


# ---- the stall watchdog on real runs ------------------------------------------------------
def rank_pid(job: Job, rank: int) -> int:
    """The pid of MPI rank ``rank`` of a job (PMI_RANK in its environment: MPICH's mpiexec;
    PMIX_RANK: Open MPI's)."""
    marks = {f"{name}={rank}".encode() for name in ("PMI_RANK", "PMIX_RANK")}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for pid in descendants(job.proc.pid):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marks & set(environ):
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
