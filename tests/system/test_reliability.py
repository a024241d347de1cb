"""Reliability of real runs through the command line: a stop on SIGTERM/SIGUSR2/SIGINT
writes a checkpoint from which training continues bit for bit, alone and under mpiexec, and a
finished run started again does nothing; non-finite gradients are skipped, then end the run
with one error line and an intact checkpoint; a failing rank ends the whole job with its
message and leaves no process behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from dba3c.training import checkpoint
from tests.support import dba3c, latest_checkpoint, read_jsonl
from tests.support.jobs import (
    Job,
    assert_identical,
    assert_stopped_by_signal,
    ckpt_steps,
    error_lines,
    stop_with_signal,
    summary,
    wait_for_steps,
)

QUIET = ["eval.every=0", "run.progress=none", "run.log_every=1"]
# Breakout's A3C-FF network on seeded random batches: no simulators, and batch t depends only
# on (seed, rank, t), so a run is a deterministic function of its step count
SYNTH = ["configs/breakout.yaml", "debug.synthetic_data=true", "model.kind=a3c_ff",
         "train.batch_size=4", "train.max_seconds=0", *QUIET]
# CartPole with real simulators, stopped only by a signal
CARTPOLE = ["configs/cartpole.yaml", "train.max_steps=1000000", "train.max_seconds=600",
            "eval.stop_at_target=false", "run.checkpoint_every=0", *QUIET]


# ---- a signal stops one process cleanly -----------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2], ids=lambda s: s.name)
def test_signal_stops_a_single_process_run_with_a_checkpoint_and_it_resumes(tmp_path, sig):
    run = tmp_path / "run"
    with Job("train", *CARTPOLE, f"run.dir={run}") as job:
        wait_for_steps(run, job, 5)
        rc = stop_with_signal(job, job.proc.pid, sig, timeout=10)
    assert rc == 0, job.output[-3000:]
    stop = summary(run)
    step = stop["final_step"]
    assert stop["stop_reason"] == f"signal {sig.name}"
    assert f"run finished at step {step} (signal {sig.name})" in job.output
    assert ckpt_steps(run) == [step]  # checkpoint_every=0: only the signal wrote one
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, step + 1))
    saved = latest_checkpoint(run)
    assert saved.step == step and np.isfinite(saved.theta).all()

    # started again with nothing left to do: no extra step, the checkpoint stays as it is
    dba3c("train", *CARTPOLE, f"run.dir={run}", f"train.max_steps={step}")
    assert ckpt_steps(run) == [step]
    assert_identical(latest_checkpoint(run), saved)
    assert summary(run)["final_step"] == step
    assert summary(run)["stop_reason"] == f"train.max_steps={step} reached"
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, step + 1))

    # resume for 5 more steps: the step count and the metrics continue without a gap
    dba3c("train", *CARTPOLE, f"run.dir={run}", f"train.max_steps={step + 5}")
    assert latest_checkpoint(run).step == step + 5
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, step + 6))
    assert summary(run)["stop_reason"] == f"train.max_steps={step + 5} reached"


@pytest.mark.slow
def test_sigterm_then_resume_equals_an_uninterrupted_run_bit_for_bit(tmp_path):
    """B is stopped by SIGTERM at a step S it does not know in advance and resumed to N;
    A runs to N in one go, checkpointing at S. Synthetic data makes both deterministic, so
    the signal checkpoint must equal A's state at S and both must end identical."""
    b = tmp_path / "b"
    with Job("train", *SYNTH, "train.max_steps=1000000", "run.checkpoint_every=0",
             f"run.dir={b}") as job:
        wait_for_steps(b, job, 10)
        assert stop_with_signal(job, job.proc.pid, signal.SIGTERM, timeout=10) == 0
    s = summary(b)["final_step"]
    assert summary(b)["stop_reason"] == "signal SIGTERM" and ckpt_steps(b) == [s]
    n = s + 7
    dba3c("train", *SYNTH, f"train.max_steps={n}", "run.checkpoint_every=0", f"run.dir={b}")
    a = tmp_path / "a"
    dba3c("train", *SYNTH, f"train.max_steps={n}", f"run.checkpoint_every={s}",
          f"run.dir={a}")
    assert ckpt_steps(a) == [s, n]
    assert_identical(checkpoint.load(checkpoint.checkpoint_path(b / "checkpoints", s)),
                     checkpoint.load(checkpoint.checkpoint_path(a / "checkpoints", s)))
    assert_identical(latest_checkpoint(b), latest_checkpoint(a))
    assert latest_checkpoint(a).step == n
    steps_b = [m["step"] for m in read_jsonl(b / "metrics.jsonl")]
    assert steps_b == list(range(1, n + 1))
    loss_a = [m["loss/total"] for m in read_jsonl(a / "metrics.jsonl")]
    loss_b = [m["loss/total"] for m in read_jsonl(b / "metrics.jsonl")]
    assert loss_a == loss_b  # the same mini-batches and parameters at every step


@pytest.mark.slow
@pytest.mark.parametrize("target", ["launcher", "ctrl-c", "mpiexec"])
def test_signal_stops_a_distributed_run_with_a_checkpoint_and_it_resumes(tmp_path, target):
    """``dba3c launch --workers 1 --ps 1`` (ranks: 0 chief+worker, 1 PS), stopped by:
    - launcher: SIGTERM to the ``dba3c launch`` process the user started (``kill PID``,
      ``timeout``, a process supervisor); it forwards SIGTERM to mpiexec;
    - ctrl-c: SIGINT to the launcher's whole process group, as a terminal's Ctrl-C does;
    - mpiexec: SIGTERM to mpiexec itself (``kill`` in a batch script): mpiexec forwards it
      to every rank; rank 0 stops the run, the others ignore it. Slurm's ``scancel`` and time
      limit send SIGTERM to every task directly, which the ranks see the same way.
    Each time: exit 0 within 10 s, no process left, a checkpoint at the final step, and the
    resumed run ends bit for bit where a single process trained on the same data ends."""
    run = tmp_path / "run"
    args = ["launch", *SYNTH, "--workers", 1, "--ps", 1, "run.checkpoint_every=0"]
    with Job(*args, "train.max_steps=1000000", f"run.dir={run}") as job:
        wait_for_steps(run, job, 10)
        if target == "ctrl-c":
            sig, t0 = signal.SIGINT, time.monotonic()
            os.killpg(job.proc.pid, signal.SIGINT)
            rc = job.wait(timeout=40)
            assert job.ended - t0 < 10, f"took {job.ended - t0:.1f} s to stop"
        else:
            sig = signal.SIGTERM
            pid = job.proc.pid if target == "launcher" else job.child("mpiexec")
            rc = stop_with_signal(job, pid, sig, timeout=10)
        assert rc == 0, job.output[-3000:]
        s = assert_stopped_by_signal(job, run, sig)
    # resume to s + 3, against a single-process run with the same data to s + 3
    dba3c(*args, f"train.max_steps={s + 3}", f"run.dir={run}")
    ref = tmp_path / "ref"
    dba3c("train", *SYNTH, f"train.max_steps={s + 3}", f"run.dir={ref}")
    got, want = latest_checkpoint(run), latest_checkpoint(ref)
    assert got.step == s + 3
    assert_identical(got, want)
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, s + 4))
    if target == "launcher":  # once: started again with nothing left to do, nothing changes
        dba3c(*args, f"train.max_steps={s + 3}", f"run.dir={run}")
        assert ckpt_steps(run) == [s, s + 3]
        assert_identical(latest_checkpoint(run), want)
        assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, s + 4))
        assert summary(run)["stop_reason"] == f"train.max_steps={s + 3} reached"


# ---- non-finite gradients -----------------------------------------------------------------
@pytest.mark.slow
def test_a_short_nan_burst_is_skipped_and_counted(tmp_path):
    run = tmp_path / "run"
    k = 5
    dba3c("train", *SYNTH, "train.max_steps=12", "run.checkpoint_every=4",
          f"debug.nan_at_step={k}", "debug.nan_steps=2", "train.max_nonfinite=3",
          f"run.dir={run}")
    metrics = read_jsonl(run / "metrics.jsonl")
    # gradients computed at versions k and k+1 are poisoned: steps k+1 and k+2 are skips
    expected = [max(0, min(2, step - k)) for step in range(1, 13)]
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert [m["train/nonfinite_skipped"] for m in metrics] == expected
    final = latest_checkpoint(run)
    assert final.step == 12 and final.adam_count == 12 - 2  # skips leave Adam untouched
    assert np.isfinite(final.theta).all() and np.isfinite(final.adam_m).all()
    assert np.isfinite(final.adam_v).all()
    assert summary(run)["stop_reason"] == "train.max_steps=12 reached"


def _assert_nonfinite_stop(proc_rc: int, output: str, run: Path, allowed_steps) -> None:
    """Exit 1, one ``error:`` line naming train.max_nonfinite, no traceback, and the
    newest checkpoint is one of ``allowed_steps``, loads, and is finite."""
    assert proc_rc == 1, output[-3000:]
    errors = error_lines(output)
    assert len(errors) == 1 and "train.max_nonfinite=3" in errors[0], output[-3000:]
    assert "Traceback" not in output
    last = latest_checkpoint(run)
    assert last.step in allowed_steps
    for a in (last.theta, last.adam_m, last.adam_v):
        assert np.isfinite(a).all()


NAN_STOP = ["run.checkpoint_every=4", "debug.nan_at_step=5", "debug.nan_steps=100",
            "train.max_nonfinite=3", "train.max_steps=1000"]


@pytest.mark.slow
def test_a_long_nan_streak_stops_a_single_process_run_with_an_error(tmp_path):
    run = tmp_path / "run"
    proc = dba3c("train", *SYNTH, *NAN_STOP, f"run.dir={run}", check=False)
    # poisoned gradients at versions 5, 6, 7: the third skip (step 8) ends the run before
    # step 8 is checkpointed; step 4 is the last good state
    _assert_nonfinite_stop(proc.returncode, proc.stderr, run, allowed_steps=[4])
    assert "stopped at step 8" in error_lines(proc.stderr)[0]
    assert ckpt_steps(run) == [4]


@pytest.mark.slow
def test_a_long_nan_streak_stops_a_distributed_run_with_an_error(tmp_path):
    run = tmp_path / "run"
    proc = dba3c("launch", *SYNTH, *NAN_STOP, "--workers", 1, "--ps", 1, f"run.dir={run}",
                 check=False, timeout=120)
    # the PS may hand the chief its state at step 8 (parameters unchanged since step 5)
    # before the worker gives up
    _assert_nonfinite_stop(proc.returncode, proc.stdout + proc.stderr, run,
                           allowed_steps=[4, 8])


# ---- a failing rank -----------------------------------------------------------------------
@pytest.mark.slow
def test_a_rank_that_raises_ends_the_job_nonzero_with_its_message(tmp_path):
    run = tmp_path / "run"
    # ranks: 0 chief+worker, 1 PS, 2 worker; rank 2 raises RuntimeError at step 5
    with Job("launch", *SYNTH, "--workers", 2, "--ps", 1, "train.max_steps=1000",
             "debug.fail_rank=2", "debug.fail_step=5", f"run.dir={run}") as job:
        rc = job.wait(timeout=180)
        failed_at = job.first_time("error: rank 2 (worker) failed")
        assert rc != 0
        assert failed_at is not None, job.output[-3000:]
        assert job.ended - failed_at < 30
        assert "RuntimeError('injected failure on rank 2 at step 5 (debug.fail_rank)')" \
            in job.output
        time.sleep(0.5)
        assert not job.survivors(), f"left running: {job.survivors()}"
