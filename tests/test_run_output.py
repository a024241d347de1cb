"""What a run leaves behind and says at its end, through the real command line: the final
metrics line (also when ``train.max_steps`` is not a multiple of ``run.log_every``, also on a
busy host), the closing line with the commands to run next, and no TensorFlow start-up noise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dba3c.learning.tflog import filtered_stderr, is_below_level, quiet_import
from dba3c.preset import from_dict
from dba3c.training.metrics import next_steps
from dba3c.training.report import Losses, WorkerReport

from conftest import dba3c, read_jsonl

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


# ---- the pieces ----------------------------------------------------------------------------
REPORT = WorkerReport()  # no data points, frames or score yet, 0 s in each activity


def make_chief(run_dir: Path):
    """A Chief of a CartPole run logging every 5 steps."""
    from dba3c.learning.models import make_net_spec
    from dba3c.training.chief import Chief

    cfg = from_dict({"env": {"id": "CartPole-v1"}, "model": {"kind": "mlp"},
                     "train": {"max_steps": 100}, "eval": {"every": 0},
                     "run": {"dir": str(run_dir), "log_every": 5, "progress": "none"}})
    return Chief(cfg, None, make_net_spec(cfg.model, (4,), 2).layout(), num_workers=2)


def test_a_run_ended_between_log_steps_still_logs_its_last_step(tmp_path):
    """A stop that comes between log steps (a signal, the target score) and leaves no further
    step: closing the run logs the step it ended at."""
    chief = make_chief(tmp_path)
    chief.worker_report(0, REPORT)
    for step in range(1, 8):
        chief.on_step(step)
    chief.request_stop("signal SIGTERM")
    chief.close()
    assert [m["step"] for m in read_jsonl(tmp_path / "metrics.jsonl")] == [5, 7]


def test_a_workers_last_report_without_losses_is_logged(tmp_path):
    """A worker's last report comes over STATS with its losses as NaN, read back as None; a
    step logged after it (the final one, typically) averages the losses that were sent. (The
    chief used to fail on it: rank 0 died without the final metrics line.)"""
    from dba3c.distributed.wire import ReportMsg

    chief = make_chief(tmp_path)
    chief.worker_report(0, WorkerReport(policy_lag=1.0, losses=Losses(total=2.0)))
    received = ReportMsg.decode(ReportMsg(REPORT, True, 3).encode())
    last = received.report
    assert received.final and received.rank == 3 and last.losses.total is None
    chief.worker_report(3, last)
    chief.on_step(5)
    chief.close()
    record = read_jsonl(tmp_path / "metrics.jsonl")[-1]
    assert (record["step"], record["loss/total"], record["perf/policy_lag"]) == (5, 2.0, 1.0)
    assert record["loss/policy"] is None  # sent by no worker


def test_next_steps_names_the_run_directory_and_a_video_only_for_atari():
    assert next_steps("runs/bo", True) == (
        "next: dba3c plot runs/bo --out runs/bo/plots; tensorboard --logdir runs/bo/tb; "
        "dba3c evaluate runs/bo --episodes 10 --video runs/bo/game.mp4")
    assert next_steps("runs/my cp/", False) == (
        "next: dba3c plot 'runs/my cp' --out 'runs/my cp/plots'; tensorboard --logdir "
        "'runs/my cp/tb'; dba3c evaluate 'runs/my cp' --episodes 10")


ONEDNN = ("I0000 00:00:1795450614.750164    7826 port.cc:153] oneDNN custom operations are "
          "on. You may see slightly different numerical results")
PREAMBLE = ("WARNING: All log messages before absl::InitializeLog() is called are written to "
            "STDERR")


@pytest.mark.parametrize("line,level,hidden", [
    (ONEDNN, 0, False), (ONEDNN, 1, True), (ONEDNN, 2, True),
    (PREAMBLE, 0, False), (PREAMBLE, 1, True),
    ("W0000 00:00:1795450614.750164    7826 foo.cc:12] a warning", 1, False),
    ("W0000 00:00:1795450614.750164    7826 foo.cc:12] a warning", 2, True),
    ("E0000 00:00:1795450614.750164    7826 foo.cc:12] an error", 2, False),
    ("E0000 00:00:1795450614.750164    7826 foo.cc:12] an error", 3, True),
    ("Traceback (most recent call last):", 3, False),
    ("I think this is not a log line", 3, False),
])
def test_log_lines_below_the_level_are_recognised(line, level, hidden):
    assert is_below_level(line, level) == hidden


def test_quiet_import_drops_only_noise_and_keeps_the_rest_in_order(tmp_path, monkeypatch,
                                                                   capfd):
    module = "fake_noisy_library"
    (tmp_path / f"{module}.py").write_text(
        "import os\n"
        f"os.write(2, b'{PREAMBLE}\\n{ONEDNN}\\nkept 1\\n')\n"
        "os.write(2, b'E0000 00:00:1.5    7 x.cc:1] kept 2\\n')\n"
        "VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    quiet_import(module, 2)
    quiet_import(module, 2)  # e.g. cli.main called twice in one process: one filter
    assert sum(type(f).__name__ == "_QuietFinder" for f in sys.meta_path) == 1
    try:
        imported = __import__(module)
    finally:
        sys.modules.pop(module, None)
    assert imported.VALUE == 42
    assert capfd.readouterr().err == "kept 1\nE0000 00:00:1.5    7 x.cc:1] kept 2\n"
    assert not any(type(f).__name__ == "_QuietFinder" for f in sys.meta_path)  # used once


def test_filtered_stderr_passes_everything_at_level_0(capfd):
    with filtered_stderr(0):
        os.write(2, (PREAMBLE + "\n").encode())
    assert capfd.readouterr().err == PREAMBLE + "\n"

