"""Run outputs: ``metrics.jsonl``, ``eval.jsonl``, TensorBoard scalars and the live display.

One metrics namespace everywhere: ``loss/*``, ``perf/*``, ``train/*``, ``eval/*``,
``time/*`` (fractions of wall time), ``dist/*``.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
import time
from pathlib import Path

from dba3c.checkpoint import write_atomic


def truncate_jsonl(path: Path, max_step: int) -> None:
    """Drop lines with ``step > max_step`` (work after the checkpoint being resumed, which is
    about to be redone), so the step sequence has no repeats, and lines that do not parse (a
    tail torn by a crash). Atomic."""
    path = Path(path)
    if not path.exists():
        return
    kept = [line for line in path.read_text(errors="replace").splitlines()
            if (record := _parse(line)) is not None and record.get("step", 0) <= max_step]
    write_atomic(path, "".join(line + "\n" for line in kept).encode())


def next_steps(run_dir: str, atari: bool) -> str:
    """The line that ends a run: commands to paste that use its outputs (figures,
    TensorBoard, an evaluation; with a gameplay video for Atari games)."""
    run = Path(run_dir)
    evaluate = f"dba3c evaluate {shlex.quote(str(run))} --episodes 10"
    if atari:
        evaluate += f" --video {shlex.quote(str(run / 'game.mp4'))}"
    return (f"next: dba3c plot {shlex.quote(str(run))} --out "
            f"{shlex.quote(str(run / 'plots'))}; tensorboard --logdir "
            f"{shlex.quote(str(run / 'tb'))}; {evaluate}")


def _parse(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlWriter:
    """Appends one JSON object per line and flushes it."""

    def __init__(self, path: Path):
        self._file = open(path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        """Append ``record`` (non-finite floats become null)."""
        self._file.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()


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
    """Scalars under ``tb/`` for TensorBoard."""

    def __init__(self, directory: Path):
        import tensorflow as tf

        self._tf = tf
        self._writer = tf.summary.create_file_writer(str(directory))

    def write(self, step: int, record: dict) -> None:
        """Every numeric entry of ``record`` as a scalar at ``step``."""
        with self._writer.as_default(step=step):
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tf.summary.scalar(key, value)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close."""
        self._writer.close()
