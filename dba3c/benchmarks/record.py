"""What ``dba3c bench`` node, profile, long and scale record beside their figures, and where.

- :func:`command_line`: the ``dba3c bench`` command that reproduces a measurement;
- :func:`record`: the results as JSON under ``bench/`` (:func:`write_results`, atomic) and,
  when asked (``dba3c bench BENCH --log``), the Markdown page as a new log entry
  ``docs/log/<YYYY-MM-DD>-bench-<kind>.md`` (:func:`write_log`, never overwriting one). No
  bench edits a curated page (docs/benchmarks.md, "Measuring and recording").
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from dba3c.training.rundir import write_atomic


def command_line(options: str, config: str, overrides: list[str]) -> str:
    """The ``dba3c bench`` command that reproduces a measurement: ``options`` (the bench and
    its options, each with its leading space), ``--config`` unless the default preset, and the
    overrides."""
    return ("dba3c bench" + options
            + (f" --config {config}" if config != "configs/breakout.yaml" else "")
            + "".join(f" {o}" for o in overrides))


def write_results(results: dict, out_json: Path) -> None:
    """Write ``results`` to ``out_json`` as indented JSON, atomically (its directory made
    first)."""
    out_json.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out_json, (json.dumps(results, indent=1) + "\n").encode())


def write_log(page: str, log_dir: Path, day: str, kind: str) -> Path:
    """Write ``page`` as a new log entry ``DAY-bench-KIND.md`` in ``log_dir``; return its path.
    An existing entry is never overwritten: the first free one of ``DAY-bench-KIND.md``,
    ``DAY-bench-KIND-2.md``, ``-3``, ... is taken by an exclusive create."""
    log_dir.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        path = log_dir / f"{day}-bench-{kind}{f'-{n}' if n > 1 else ''}.md"
        try:
            with open(path, "x", encoding="utf-8") as f:
                f.write(page)
            return path
        except FileExistsError:
            n += 1


def record(results: dict, page: str, out_json: Path, kind: str,
           log_dir: Path | None) -> Path | None:
    """Write ``results`` to ``out_json`` (:func:`write_results`) and, with ``log_dir``,
    ``page`` as a new log entry of ``kind`` (node, profile, long, scale), dated by the
    results' ``date`` (today where they have none; :func:`write_log`). The entry's path, or
    None without ``log_dir``."""
    write_results(results, out_json)
    if log_dir is None:
        return None
    return write_log(page, log_dir, results.get("date") or date.today().isoformat(), kind)
