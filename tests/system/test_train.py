"""End-to-end training through the real command line: learning, Atari smoke, resume,
distributed equivalence and failure handling."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import (
    ROOT,
    SYNTH,
    assert_close,
    dba3c,
    latest_checkpoint,
    python_output,
    read_jsonl,
)

METRIC_KEYS = {"step", "time_s", "perf/data_points_per_s", "perf/env_frames_per_s",
               "train/online_score", "loss/policy", "loss/value", "loss/entropy",
               "perf/policy_lag"}


@pytest.mark.slow
def test_cartpole_learns_to_195_within_3_minutes(run_dir):
    dba3c("train", "configs/cartpole.yaml", f"run.dir={run_dir}", "run.progress=none",
          timeout=240)
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert max(e["mean"] for e in evals) >= 195
    assert all(e["episodes"] == 20 for e in evals)
    assert summary["time_to_target_s"] is not None and summary["time_to_target_s"] < 180


@pytest.mark.slow
def test_breakout_smoke_writes_metrics_from_the_real_rom(run_dir):
    dba3c("train", "configs/breakout.yaml", f"run.dir={run_dir}", "train.max_steps=20",
          "train.max_seconds=0", "eval.every=0", "run.log_every=5", "run.progress=none",
          "env.num_envs=8", timeout=180)
    lines = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in lines] == [5, 10, 15, 20]
    assert METRIC_KEYS <= set(lines[-1])
    assert lines[-1]["perf/data_points_per_s"] > 0 and lines[-1]["perf/env_frames_per_s"] > 0
    assert (run_dir / "config.yaml").exists() and list((run_dir / "tb").iterdir())
    assert latest_checkpoint(run_dir).step == 20


def test_resume_continues_with_identical_state(tmp_path):
    """10 steps + resume to 20 == 20 steps in one go (deterministic synthetic data)."""
    common = ["configs/breakout.yaml", *SYNTH, "model.kind=a3c_ff", "train.batch_size=8",
              "run.checkpoint_every=5", "train.max_seconds=0"]
    once, twice = tmp_path / "once", tmp_path / "twice"
    dba3c("train", *common, f"run.dir={once}", "train.max_steps=20")
    dba3c("train", *common, f"run.dir={twice}", "train.max_steps=10")
    first = latest_checkpoint(twice)
    assert first.step == 10
    dba3c("train", *common, f"run.dir={twice}", "train.max_steps=20")
    a, b = latest_checkpoint(once), latest_checkpoint(twice)
    assert a.step == b.step == 20 and a.adam_count == b.adam_count == 20
    assert_close(b.theta, a.theta)
    assert_close(b.adam_m, a.adam_m)
    assert_close(b.adam_v, a.adam_v)
    steps = [m["step"] for m in read_jsonl(twice / "metrics.jsonl")]
    assert steps == list(range(1, 21))  # no gap, no repeat across the resume


def _launch(run_dir, workers, ps, *extra, timeout=240):
    return dba3c("launch", "configs/breakout.yaml", "--workers", workers, "--ps", ps,
                 *SYNTH, "model.kind=a3c_ff", "train.batch_size=8", "train.max_steps=5",
                 "train.max_seconds=0", "run.checkpoint_every=5", f"run.dir={run_dir}", *extra,
                 timeout=timeout)


def test_thread_settings_reach_tensorflow_in_train_and_launch(tmp_path):
    """train.intra_op_threads / inter_op_threads size a training process's TensorFlow pools,
    though the chief's TensorBoard writer starts TensorFlow before the learner exists (it
    used to fix the pools first: RuntimeError and a traceback from `dba3c train`)."""
    threads = ["train.intra_op_threads=1", "train.inter_op_threads=3"]
    overrides = [*SYNTH, "model.kind=a3c_ff", "train.batch_size=8", "train.max_seconds=0",
                 "train.max_steps=3", f"run.dir={tmp_path / 'train'}", *threads]
    code = ("from dba3c.distributed.run import train\n"
            f"code = train('configs/breakout.yaml', {overrides!r}, 1)\n"
            "import tensorflow as tf\n"
            "t = tf.config.threading\n"
            "print(code, t.get_intra_op_parallelism_threads(), "
            "t.get_inter_op_parallelism_threads())\n")
    assert python_output(code, timeout=120) == ["0", "1", "3"]
    _launch(tmp_path / "launch", 1, 1, *threads)  # the distributed chief trains: exit 0
    assert latest_checkpoint(tmp_path / "launch").step == 5


@pytest.mark.slow
def test_one_worker_with_two_ps_equals_single_process(tmp_path):
    single = tmp_path / "single"
    dba3c("train", "configs/breakout.yaml", *SYNTH, "model.kind=a3c_ff", "train.batch_size=8",
          "train.max_steps=5", "train.max_seconds=0", f"run.dir={single}")
    _launch(tmp_path / "ps2", 1, 2)
    _launch(tmp_path / "ps1", 1, 1)
    ref = latest_checkpoint(single)
    for name in ("ps2", "ps1"):
        got = latest_checkpoint(tmp_path / name)
        assert got.step == ref.step == 5
        assert_close(got.theta, ref.theta)
        assert_close(got.adam_m, ref.adam_m)
        assert_close(got.adam_v, ref.adam_v)


@pytest.mark.slow
def test_distributed_cartpole_learns_within_3_minutes(run_dir):
    dba3c("launch", "configs/cartpole.yaml", "--workers", 3, "--ps", 2, f"run.dir={run_dir}",
          "run.progress=none", timeout=240)
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert max(e["mean"] for e in evals) >= 195
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["time_to_target_s"] < 180
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert metrics[-1]["perf/effective_batch"] == 3 * 32


def _ranks_of(launcher_pid: int) -> dict[int, int]:
    """PMI rank -> pid of the dba3c processes started under this launcher (its descendants
    only: ranks of other jobs on the same machine are left alone)."""
    parents = {}
    for proc in Path("/proc").iterdir():
        try:
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue

    def launched(pid: int) -> bool:
        while pid > 1 and pid != launcher_pid:
            pid = parents.get(pid, 0)
        return pid == launcher_pid

    ranks = {}
    for pid in filter(launched, parents):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dba3c" in cmd and b"train" in cmd:
            for item in env:
                if item.startswith(b"PMI_RANK="):
                    ranks[int(item.split(b"=")[1])] = pid
    return ranks


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["worker", "ps", "chief"])
def test_sigkill_of_one_rank_ends_the_job_nonzero_within_30s(run_dir, victim):
    proc = subprocess.Popen(
        [sys.executable, "-m", "dba3c", "launch", "configs/cartpole.yaml", "--workers", "2",
         "--ps", "1", f"run.dir={run_dir}", "run.progress=none", "train.max_steps=0",
         "train.max_seconds=300", "eval.every=0", "eval.stop_at_target=false",
         "run.log_every=1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "metrics.jsonl").exists() or \
                not (run_dir / "metrics.jsonl").read_text().strip():
            assert time.monotonic() < deadline and proc.poll() is None, "job did not start"
            time.sleep(0.5)
        ranks = _ranks_of(proc.pid)
        target = {"chief": 0, "ps": 1, "worker": max(ranks)}[victim]
        os.kill(ranks[target], signal.SIGKILL)
        killed_at = time.monotonic()
        rc = proc.wait(timeout=60)
        assert time.monotonic() - killed_at < 30
        assert rc != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_library_train_is_the_command_line_train(tmp_path, capsys):
    """``dba3c.distributed.run.train`` (what the submitit job calls) trains exactly like ``dba3c
    train`` and reports bad input the same way: one error line, exit code 2, nothing written."""
    from dba3c.distributed.run import train

    common = ["configs/breakout.yaml", *SYNTH, "model.kind=a3c_ff", "train.batch_size=8",
              "train.max_seconds=0", "train.max_steps=6"]
    bad = tmp_path / "bad"
    assert train(common[0], [*common[1:], "train.lr=-1", f"run.dir={bad}"], 1) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "train.lr" in err[0]
    assert not bad.exists()
    library, cli = tmp_path / "library", tmp_path / "cli"
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)}
    try:
        assert train(common[0], [*common[1:], f"run.dir={library}"], 1) == 0
    finally:  # the chief took over the polite signals of this (pytest's) process
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert "run finished at step 6" in capsys.readouterr().err
    dba3c("train", *common, f"run.dir={cli}")
    a, b = latest_checkpoint(library), latest_checkpoint(cli)
    assert a.step == b.step == 6
    assert_close(a.theta, b.theta)
    assert_close(a.adam_v, b.adam_v)
