"""Checkpoint files (dba3c.training.checkpoint): SIGKILL at arbitrary moments of a save, in a
child process, leaves a loadable checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dba3c.training import checkpoint
from dba3c.training.checkpoint import Checkpoint
from tests.support import ROOT

# ---- SIGKILL at arbitrary moments of a save -----------------------------------------------
SAVER = r"""
import sys
import numpy as np
from dba3c.training import checkpoint

directory, n = sys.argv[1], int(sys.argv[2])
latest = checkpoint.load_latest(directory)
step = latest.step if latest else 0
print("ready", step, flush=True)
while True:
    step += 1
    theta = np.full(n, step, np.float32)
    ckpt = checkpoint.Checkpoint(step, theta, -theta, 2 * theta, step, {"step": step})
    checkpoint.save(directory, ckpt, keep=2)
    print("saved", step, flush=True)
"""


def check_consistent(ckpt: Checkpoint, n: int) -> None:
    """A checkpoint written by SAVER: every field derives from its step."""
    s = ckpt.step
    assert ckpt.theta.shape == ckpt.adam_m.shape == ckpt.adam_v.shape == (n,)
    assert (ckpt.theta == s).all() and (ckpt.adam_m == -s).all() and (ckpt.adam_v == 2 * s).all()
    assert ckpt.adam_count == s and ckpt.meta == {"step": s}


@pytest.mark.slow
def test_sigkill_at_any_moment_of_saving_leaves_a_loadable_checkpoint(tmp_path, capsys):
    """SIGKILL a process that saves 2M-float checkpoints in a loop, 16 times, 0 to 1 s after
    it started, every other time just as a temporary file is being written (each restart
    resumes from the newest checkpoint, like a preempted run). After every kill the newest
    valid checkpoint is complete and no older than the last save reported finished, and no
    corrupt file is ever visible."""
    n = 2_000_000
    directory = tmp_path / "ck"
    rng = random.Random(1234)
    saved_total, killed_mid_write = 0, 0
    for i in range(16):
        child = subprocess.Popen([sys.executable, "-c", SAVER, str(directory), str(n)],
                                 cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        try:
            first = child.stdout.readline().split()
            assert first[0] == "ready"
            time.sleep((i + rng.random()) / 16)  # 0 to 1 s: several saves, killed anywhere
            if i % 2:  # every other time, at the next moment a temporary file is being written
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and not any(
                        p.name.endswith(f".tmp-{child.pid}") for p in directory.glob(".*")):
                    time.sleep(0.001)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            rest = child.stdout.read()
            child.wait()
        assert child.returncode == -signal.SIGKILL
        done = [int(w.split()[1]) for w in rest.splitlines() if w.startswith("saved")]
        saved_total += len(done)
        if directory.exists():  # this child's temporary file: killed inside a write
            killed_mid_write += any(p.name.endswith(f".tmp-{child.pid}")
                                    for p in directory.iterdir())
        ckpt = checkpoint.load_latest(directory)
        assert capsys.readouterr().err == "", "a corrupt checkpoint was visible"
        if ckpt is None:
            assert not done and int(first[1]) == 0
            continue
        check_consistent(ckpt, n)
        reported = done[-1] if done else int(first[1])
        # the newest is the last reported save, or one more whose rename beat the print
        assert reported <= ckpt.step <= reported + 1
        steps = sorted(int(p.name[5:15]) for p in directory.iterdir() if p.name[0] != ".")
        assert len(steps) <= 3 and steps[-1] == ckpt.step  # 3: killed before pruning
    assert saved_total >= 3
    assert killed_mid_write >= 3, "too few kills landed inside a write: the test proved little"
    # the next successful save clears the temporary files the kills left behind
    latest = checkpoint.load_latest(directory)
    assert latest is not None
    checkpoint.save(directory, checkpoint.Checkpoint(
        latest.step + 1, np.zeros(3, np.float32), np.zeros(3, np.float32),
        np.zeros(3, np.float32), 0, {}), keep=2)
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".")]
