"""Run outputs besides the files of :mod:`dba3c.rundir`: TensorBoard scalars and the live
display.

One metrics namespace everywhere: ``loss/*``, ``perf/*``, ``train/*``, ``eval/*``,
``time/*`` (fractions of wall time), ``dist/*``.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
import types
from pathlib import Path

from dba3c.rundir import RunDir


def steady_throughput(metrics: list[dict]) -> float | None:
    """Mean ``perf/data_points_per_s`` over the second half of a run's metrics lines (the
    first half holds start-up and warm-up); None without any."""
    rates = [m["perf/data_points_per_s"] for m in metrics
             if m.get("perf/data_points_per_s") is not None]
    tail = rates[len(rates) // 2:]
    return sum(tail) / len(tail) if tail else None


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


class TensorBoard:
    """Scalars under ``tb/`` for TensorBoard, written through TensorFlow's summary API, or
    without TensorFlow (``use_tensorflow=False``: tensorboard's own writer, for
    synthetic-compute runs that must not import TensorFlow)."""

    def __init__(self, directory: Path, use_tensorflow: bool = True):
        if use_tensorflow:
            import tensorflow as tf

            self._tf = tf
            self._writer = tf.summary.create_file_writer(str(directory))
        else:
            from tensorboard.summary import Writer

            # tensorboard's file I/O imports TensorFlow unless a module tensorboard.compat.notf
            # exists (the marker of its no-TensorFlow build): then it uses its own stub
            sys.modules.setdefault("tensorboard.compat.notf",
                                   types.ModuleType("tensorboard.compat.notf"))
            self._tf = None
            self._writer = Writer(str(directory))

    def write(self, step: int, record: dict) -> None:
        """Every numeric entry of ``record`` as a scalar at ``step``."""
        scalars = {key: value for key, value in record.items()
                   if key != "step" and isinstance(value, (int, float)) and math.isfinite(value)}
        if self._tf is None:
            for key, value in scalars.items():
                self._writer.add_scalar(key, value, step)
        else:
            with self._writer.as_default(step=step):
                for key, value in scalars.items():
                    self._tf.summary.scalar(key, value)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close."""
        self._writer.close()
