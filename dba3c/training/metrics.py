"""Run outputs besides the files of :mod:`dba3c.training.rundir`: TensorBoard scalars and the live
display.

One metrics namespace everywhere: ``loss/*``, ``perf/*``, ``train/*``, ``eval/*``,
``time/*`` (fractions of wall time), ``dist/*``.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import shlex
import sys
import time
import types
from pathlib import Path
from typing import Protocol

from dba3c.config import Config
from dba3c.training.rundir import RunDir, disk_space_checked


def steady_throughput(metrics: list[dict]) -> float | None:
    """Mean ``perf/data_points_per_s`` over the second half of a run's metrics lines (the
    first half holds start-up and warm-up); None without any."""
    rates = [m["perf/data_points_per_s"] for m in metrics
             if m.get("perf/data_points_per_s") is not None]
    tail = rates[len(rates) // 2:]
    return sum(tail) / len(tail) if tail else None


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 40) -> str:
    """``values`` in at most ``width`` characters, each the mean of its share of the values
    scaled between their min (▁) and max (█); empty for no values."""
    if not values:
        return ""
    n = min(width, len(values))
    bins = [values[len(values) * i // n: len(values) * (i + 1) // n] for i in range(n)]
    means = [sum(b) / len(b) for b in bins]
    lo, hi = min(means), max(means)
    top = len(SPARKS) - 1
    return "".join(SPARKS[round((m - lo) / (hi - lo) * top) if hi > lo else 0] for m in means)


def run_report(run: RunDir) -> list[str]:
    """What the agent did, from the run directory: steps and data points trained, the
    training games' score over the run as a text curve, and each greedy evaluation."""
    metrics, evals, summary = run.read_metrics(), run.read_evals(), run.read_summary()
    if not metrics:
        return []
    last = metrics[-1]
    rate = steady_throughput(metrics)
    lines = [f"trained {last['step']:,} steps in {last['time_s']:.0f} s"
             + (f", {rate:,.0f} data points/s" if rate is not None else "")]
    online = [m["train/online_score"] for m in metrics
              if m.get("train/online_score") is not None]
    if online:
        lines.append(f"score in training games: {online[0]:.1f} -> {online[-1]:.1f} "
                     f"(max {max(online):.1f})  {sparkline(online)}")
    shown = evals[-5:]
    if shown:
        lines.append("greedy evaluations: " + "; ".join(
            f"step {e['step']}: mean {e['mean']:.1f} over {e['episodes']} games" for e in shown)
            + (f" ({len(evals) - len(shown)} earlier in eval.jsonl)" if evals[5:] else ""))
    if summary.get("time_to_target_s") is not None:
        lines.append(f"target {summary['target_score']:g} reached at step "
                     f"{summary['target_step']} after {summary['time_to_target_s']:.0f} s")
    return lines


def next_steps(run_dir: str, atari: bool) -> str:
    """The line that ends a run: commands to paste that use its outputs (figures,
    TensorBoard, an evaluation; with a gameplay video for Atari games)."""
    run = Path(run_dir)
    tb = RunDir(run).tensorboard_dir
    evaluate = f"dba3c evaluate {shlex.quote(str(run))} --episodes 10"
    if atari:
        evaluate += f" --video {shlex.quote(str(run / 'game.mp4'))}"
    return (f"next: dba3c plot {shlex.quote(str(run))} --out "
            f"{shlex.quote(str(run / 'plots'))}; tensorboard --logdir "
            f"{shlex.quote(str(tb))}; {evaluate}")


class Progress:
    """A tqdm bar on a terminal, a line every ``every_s`` seconds otherwise, or nothing."""

    def __init__(self, mode: str, total_steps: int, initial: int, every_s: float = 10.0):
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.mode, self.every_s, self._last = mode, every_s, 0.0
        self._bar = None
        if mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps or None, initial=initial, unit="step",
                             dynamic_ncols=True, file=sys.stderr)

    def update(self, step: int, record: dict) -> None:
        """Show the newest step and its headline figures."""
        score = record.get("train/online_score")
        text = (f"dp/s {record.get('perf/data_points_per_s', 0):.0f} "
                f"score {'-' if score is None else f'{score:.1f}'}")
        if self._bar is not None:
            self._bar.n = step
            self._bar.set_postfix_str(text, refresh=True)
        elif self.mode == "lines" and time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            print(f"step {step} t={record.get('time_s', 0):.0f}s {text}", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        """Finish the bar."""
        if self._bar is not None:
            self._bar.close()


def scalars(record: dict) -> dict[str, float]:
    """The finite numeric entries of a metrics record, ``step`` left out."""
    return {key: value for key, value in record.items()
            if key != "step" and isinstance(value, (int, float)) and math.isfinite(value)}


class ScalarLog(Protocol):
    """Where the chief's scalars go: TensorBoard, and Weights & Biases with ``run.wandb``."""

    def write(self, step: int, record: dict) -> None:
        """Every numeric entry of ``record`` as a scalar at global step ``step``."""

    def close(self) -> None:
        """Flush and close."""


class TensorBoard:
    """Scalars under ``tb/`` for TensorBoard, written through TensorFlow's summary API, or
    without TensorFlow (``use_tensorflow=False``: tensorboard's own writer, for
    synthetic-compute runs that must not import TensorFlow)."""

    def __init__(self, directory: Path, use_tensorflow: bool = True):
        self.directory = Path(directory)
        if use_tensorflow:
            import tensorflow as tf

            self._tf = tf
            self._writer = tf.summary.create_file_writer(str(directory))
            self._no_space: type[Exception] | tuple[()] = tf.errors.ResourceExhaustedError
        else:
            from tensorboard.summary import Writer

            # tensorboard's file I/O imports TensorFlow unless a module tensorboard.compat.notf
            # exists (the marker of its no-TensorFlow build): then it uses its own stub
            sys.modules.setdefault("tensorboard.compat.notf",
                                   types.ModuleType("tensorboard.compat.notf"))
            self._tf = None
            self._writer = Writer(str(directory))
            self._no_space = ()  # its writer raises OSError itself

    def write(self, step: int, record: dict) -> None:
        """Every numeric entry of ``record`` as a scalar at ``step`` (a full disk:
        :class:`~dba3c.training.rundir.DiskFull`)."""
        values = scalars(record)
        with disk_space_checked(self.directory):
            try:
                if self._tf is None:
                    for key, value in values.items():
                        self._writer.add_scalar(key, value, step)
                else:
                    with self._writer.as_default(step=step):
                        for key, value in values.items():
                            self._tf.summary.scalar(key, value)
                self._writer.flush()
            except self._no_space as e:  # how TensorFlow reports ENOSPC
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from e

    def close(self) -> None:
        """Flush and close."""
        self._writer.close()


class Wandb:
    """The same scalars, under the same names, to a Weights & Biases run (``run.wandb``).

    Every scalar is plotted against the global step, logged as the metric ``step``
    (evaluations finish after later training steps were logged, and W&B's own step must
    only grow). The W&B run id comes from the run directory's absolute path, so a resumed
    run continues the same W&B run; its files go under ``RUN_DIR/wandb``.
    """

    def __init__(self, cfg: Config, directory: Path):
        import wandb

        path = str(Path(directory).resolve())
        self._run = wandb.init(project=cfg.run.wandb_project, mode=cfg.run.wandb_mode,
                               dir=path, name=Path(path).name, config=cfg.to_dict(),
                               id=hashlib.sha256(path.encode()).hexdigest()[:16],
                               resume="allow")
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")

    def write(self, step: int, record: dict) -> None:
        """Every numeric entry of ``record`` at global step ``step``."""
        self._run.log({"step": step, **scalars(record)})

    def close(self) -> None:
        """Finish the W&B run (offline: its files stay for ``wandb sync``)."""
        self._run.finish()
