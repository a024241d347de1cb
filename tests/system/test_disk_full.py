"""A full disk, through the real command line, on a small tmpfs mounted for the test (as
root; skipped elsewhere): the run ends with exit 1 and one line naming the file it could not
write and the space left; the checkpoints written before are whole; once there is space, the
same command resumes from the newest of them."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from dba3c.training import checkpoint
from tests.support import dba3c, read_jsonl
from tests.support.jobs import ckpt_steps, error_lines, summary

UNITS = {"B": 1, "KiB": 1024}


@pytest.fixture
def small_fs(tmp_path):
    """A 160 KiB tmpfs (room for two checkpoints of CartPole's network, 60 KiB each, not
    three), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "fs"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_ends_the_run_with_one_line_and_a_rerun_resumes(small_fs):
    run = small_fs / "run"
    # only checkpoints grow until the end (metrics and TensorBoard are written at step 40)
    args = ["train", "configs/cartpole.yaml", "debug.synthetic_data=true", "eval.every=0",
            "run.progress=none", "train.max_seconds=0", "train.max_steps=40",
            "run.checkpoint_every=5", "run.log_every=1000", f"run.dir={run}"]
    full = dba3c(*args, check=False, timeout=120)
    errors = error_lines(full.stderr)
    assert full.returncode == 1 and len(errors) == 1, full.stderr
    written = re.fullmatch(
        rf"error: cannot write {re.escape(str(run))}/checkpoints/step-(\d{{10}})\.ckpt: No "
        rf"space left on device \(([\d.]+) (B|KiB) free on its file system\); what was "
        rf"written before is intact: free space and run the same command again to resume "
        rf"from the newest checkpoint", errors[0])
    assert written is not None, errors
    kept = ckpt_steps(run)
    assert kept == [5, 10] and int(written[1]) == 15
    sizes = [checkpoint.checkpoint_path(run / "checkpoints", s).stat().st_size for s in kept]
    assert float(written[2]) * UNITS[written[3]] < sizes[0]  # the next one did not fit
    for step in kept:  # whole, and nothing half-written left beside them
        assert checkpoint.load(checkpoint.checkpoint_path(run / "checkpoints", step)).step == step
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "step-0000000005.ckpt", "step-0000000010.ckpt"]

    subprocess.run(["mount", "-o", "remount,size=8m", str(small_fs)], check=True)
    dba3c(*args, timeout=120)
    assert ckpt_steps(run) == [30, 35, 40]  # the newest 3 of 15, ..., 40
    assert summary(run)["final_step"] == 40
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [40]
