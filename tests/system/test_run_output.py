"""What a run leaves behind and says at its end, through the real command line: the final
metrics line (also when ``train.max_steps`` is not a multiple of ``run.log_every``, also on a
busy host), the closing line with the commands to run next, and no TensorFlow start-up noise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import dba3c, read_jsonl

# 7 steps logged every 5: the lines are at 5 and, only because the run ends there, at 7
SHORT = ["train.max_steps=7", "train.max_seconds=0", "run.log_every=5", "eval.every=0",
         "run.progress=none"]
NOISE = ("oneDNN", "absl")


@pytest.fixture
def busy_host():
    """A busy loop on every core for the duration of the test: killed after it, and ending
    by itself after 10 minutes should the test process die first."""
    loop = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.send_signal(signal.SIGKILL)
            hog.wait()


def train(run_dir: Path, *extra: str, env: dict | None = None):
    return dba3c("train", "configs/cartpole.yaml", f"run.dir={run_dir}", *SHORT, *extra,
                 env=env, timeout=240)


def launch(run_dir: Path):
    return dba3c("launch", "configs/cartpole.yaml", "--workers", 2, "--ps", 2,
                 f"run.dir={run_dir}", *SHORT, timeout=300)


def assert_final_line_at_max_steps(run_dir: Path) -> None:
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]
    assert steps == [5, 7]


def assert_ends_with_next_steps(stderr: str, run_dir: Path) -> None:
    last = stderr.strip().splitlines()[-1]
    assert last == (f"next: dba3c plot {run_dir} --out {run_dir}/plots; tensorboard --logdir "
                    f"{run_dir}/tb; dba3c evaluate {run_dir} --episodes 10")


# ---- one process ---------------------------------------------------------------------------
def test_one_process_writes_the_final_line_and_says_what_next_without_tf_noise(run_dir):
    # oneDNN forced on: its start-up notice then appears on any x86 CPU (on AVX-512 ones it
    # is on by default), printed by TensorFlow whatever TF_CPP_MIN_LOG_LEVEL says
    proc = train(run_dir, env={"TF_ENABLE_ONEDNN_OPTS": "1"})
    assert_final_line_at_max_steps(run_dir)
    assert_ends_with_next_steps(proc.stderr, run_dir)
    assert not [line for line in proc.stderr.splitlines() if any(n in line for n in NOISE)]


def test_the_users_own_tf_log_level_wins(run_dir):
    proc = train(run_dir, env={"TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert "oneDNN custom operations are on" in proc.stderr
    assert "absl::InitializeLog()" in proc.stderr
    assert_final_line_at_max_steps(run_dir)


def test_a_finished_run_started_again_says_why_it_logs_nothing(run_dir):
    train(run_dir)
    before = (run_dir / "metrics.jsonl").read_text()
    proc = train(run_dir)
    assert (f"{run_dir} is at step 7: train.max_steps=7 reached, nothing to train"
            in proc.stderr)
    assert (run_dir / "metrics.jsonl").read_text() == before


@pytest.mark.slow
def test_one_process_writes_the_final_line_on_a_busy_host(run_dir, busy_host):
    train(run_dir)
    assert_final_line_at_max_steps(run_dir)


# ---- distributed ---------------------------------------------------------------------------
@pytest.mark.slow
def test_launch_writes_the_final_line_and_says_what_next(run_dir):
    proc = launch(run_dir)
    assert_final_line_at_max_steps(run_dir)
    assert_ends_with_next_steps(proc.stderr, run_dir)
    assert not [line for line in proc.stderr.splitlines() if any(n in line for n in NOISE)]


@pytest.mark.slow
def test_launch_writes_the_final_line_on_a_busy_host(run_dir, busy_host):
    launch(run_dir)
    assert_final_line_at_max_steps(run_dir)
