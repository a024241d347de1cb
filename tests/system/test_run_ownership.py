"""One run per run directory, through the real command line: a second run on a directory a
training run holds ends at once (exit 2, one line naming the holder) and changes nothing, in
one process and under mpiexec; a run after a SIGKILLed holder takes the directory over and
resumes. Seeded random batches make every run a function of its step count, so the held
run's outputs are compared with a lone run's."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from pathlib import Path

import pytest

from dba3c.training.lock import RunLock
from tests.support import dba3c, latest_checkpoint, read_jsonl
from tests.support.jobs import Job, assert_identical, ckpt_steps, wait_for_steps

HOST = socket.gethostname()
# CartPole's network on seeded random batches, 30 steps, a checkpoint every 10
RUN = ["configs/cartpole.yaml", "debug.synthetic_data=true", "eval.every=0",
       "run.progress=none", "run.log_every=1", "train.max_seconds=0", "train.max_steps=30",
       "run.checkpoint_every=10"]
SLOW = ["debug.slow_rank=0", "debug.slow_seconds=0.1"]  # 0.1 s a step: time to act on it


@pytest.fixture(scope="module")
def lone(tmp_path_factory) -> Path:
    """The run directory of the same run, trained alone."""
    run = tmp_path_factory.mktemp("lone") / "run"
    dba3c("train", *RUN, f"run.dir={run}")
    return run


def files(run: Path) -> dict[str, bytes]:
    """Every file under ``run`` with its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file()}


def losses(run: Path) -> list[tuple]:
    """(step, losses) of every metrics line: the same for the same mini-batches and
    parameters."""
    return [(m["step"], m["loss/policy"], m["loss/value"], m["loss/entropy"])
            for m in read_jsonl(run / "metrics.jsonl")]


def holder_pattern(pid: int, job: str = "") -> str:
    return (f"pid {pid} on host {re.escape(HOST)}{job}, started "
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00")


def test_a_second_run_on_a_held_directory_is_refused_and_changes_nothing(tmp_path, lone):
    """The first run is stopped (SIGSTOP) while the second one tries, so that every byte of
    the directory can be compared; then it trains on to what a lone run writes."""
    run = tmp_path / "run"
    with Job("train", *RUN, *SLOW, f"run.dir={run}") as first:
        wait_for_steps(run, first, 5)
        os.kill(first.proc.pid, signal.SIGSTOP)
        try:
            before = files(run)
            second = dba3c("train", *RUN, f"run.dir={run}", check=False, timeout=120)
            after = files(run)
        finally:
            os.kill(first.proc.pid, signal.SIGCONT)
        assert first.wait(timeout=120) == 0, first.output[-3000:]
    assert second.returncode == 2 and second.stdout == ""
    assert re.fullmatch(f"error: {re.escape(str(run))} is in use by another run: "
                        f"{holder_pattern(first.proc.pid)}; wait for it to end or use "
                        f"another run.dir\n", second.stderr), second.stderr
    assert after == before and "run.lock" in before
    assert not (run / "run.lock").exists()  # let go at the end
    assert ckpt_steps(run) == ckpt_steps(lone) == [10, 20, 30]
    assert_identical(latest_checkpoint(run), latest_checkpoint(lone))
    assert losses(run) == losses(lone) and [s for s, *_ in losses(run)] == list(range(1, 31))


def test_a_run_after_a_sigkilled_holder_takes_over_and_resumes(tmp_path, lone):
    run = tmp_path / "run"
    with Job("train", *RUN, *SLOW, f"run.dir={run}") as first:
        wait_for_steps(run, first, 13)  # past the checkpoint at 10
        first.kill()
    left = json.loads((run / "run.lock").read_text())  # the killed run's record
    assert left["pid"] == first.proc.pid and left["host"] == HOST and left["job"] is None
    resumed = dba3c("train", *RUN, f"run.dir={run}")
    assert (f"taking over {run} from the run of pid {first.proc.pid} on host {HOST}, "
            f"started {left['started']}: it ended without letting go of it\n"
            in resumed.stderr), resumed.stderr
    assert ckpt_steps(run) == [10, 20, 30]
    assert_identical(latest_checkpoint(run), latest_checkpoint(lone))
    assert losses(run) == losses(lone)  # the steps after 10 redone from its checkpoint


def test_rank_0_refusing_a_held_directory_ends_the_mpi_job_with_exit_2(tmp_path):
    run = tmp_path / "run"
    with RunLock(run, "42"):  # this test process holds it, as Slurm job 42
        before = files(run)
        proc = dba3c("launch", *RUN, "--workers", 1, "--ps", 1, f"run.dir={run}",
                     check=False, timeout=120)
        assert files(run) == before
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert re.fullmatch(f"error: {re.escape(str(run))} is in use by another run: "
                        f"{holder_pattern(os.getpid(), ', Slurm job 42')}; wait for it to "
                        f"end or use another run.dir", errors[0]), errors
