"""A trial: a fresh ``dba3c train`` (or ``dba3c launch``) of a config for some seconds, with
evaluation and checkpoints off, measured (:func:`run_training`). What ``dba3c tune`` scores
its settings by and ``dba3c bench node`` its end-to-end rates."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np

from dba3c.launchers.peak_rss import RssSampler
from dba3c.training.rundir import RunDir


def run_training(config: str, overrides: list[str], workers: int, seconds: float) -> dict:
    """Train for ``seconds`` (one process when ``workers`` is 0, else ``dba3c launch``);
    steady-state data points/s, time fractions, and peak RSS per rank. An exception while it
    trains (KeyboardInterrupt) ends the training process first."""
    from dba3c.training.metrics import steady_throughput

    with tempfile.TemporaryDirectory(prefix="dba3c-bench-") as run_dir:
        args = [config, *overrides, f"run.dir={run_dir}", f"train.max_seconds={seconds}",
                "train.max_steps=0", "eval.every=0", "run.progress=none", "run.log_every=10",
                "run.checkpoint_every=0"]
        cmd = [sys.executable, "-m", "dba3c"] + (
            ["train", *args] if workers == 0 else ["launch", *args, "--workers", str(workers)])
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=env)
        sampler = RssSampler(proc.pid)
        sampler.start()
        try:
            _, err = proc.communicate()
        except BaseException:  # Ctrl-C (dba3c tune): the trial ends before its directory
            proc.terminate()
            proc.wait()
            raise
        finally:
            rss = sampler.stop()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err[-2000:]}")
        metrics = RunDir(run_dir).read_metrics()
    tail = metrics[len(metrics) // 2:]
    fractions = {k: float(np.mean([m[k] for m in tail if m.get(k) is not None]))
                 for k in ("time/compute", "time/predict", "time/wait_params",
                           "time/wait_data") if any(m.get(k) is not None for m in tail)}
    return {"data_points_per_s": steady_throughput(metrics), "steps": metrics[-1]["step"],
            **fractions, "peak_rss_mb": rss}
