"""Run directories written by hand, with known evaluations and times, for the analysis tests
(``dba3c plot``, ``dba3c table``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import yaml

from tests.support import cfg_with

# what the workers of a written run train on and emulate per second
DATA_POINTS_PER_S = 100.0
FRAMES_PER_S = 400.0


def write_run(path: Path, *, game: str = "pong", seed: int = 0,
              evals: Sequence[tuple[float, float]] = (), metrics_times: Sequence[float] = (),
              config: bool = True, **sections: dict) -> Path:
    """A run directory at ``path``: the resolved config of ``game`` and ``seed`` (with the
    config ``sections`` given, e.g. ``train={"lr": 2e-3}``), one metrics line at each of
    ``metrics_times`` (steps 10, 20, ...; :data:`DATA_POINTS_PER_S` and
    :data:`FRAMES_PER_S`) and one evaluation per ``(time_s, mean)`` of ``evals`` (steps 10,
    20, ...); ``config=False`` leaves config.yaml out."""
    path.mkdir(parents=True)
    if config:
        run = {"seed": seed, "dir": str(path), **sections.pop("run", {})}
        cfg = cfg_with(env={"id": game}, run=run, **sections)
        (path / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    (path / "metrics.jsonl").write_text("".join(
        json.dumps({"step": 10 * i, "time_s": t, "perf/data_points_per_s": DATA_POINTS_PER_S,
                    "perf/env_frames_per_s": FRAMES_PER_S, "train/online_score": -1.0}) + "\n"
        for i, t in enumerate(metrics_times, start=1)))
    (path / "eval.jsonl").write_text("".join(
        json.dumps({"step": 10 * i, "time_s": t, "mean": mean, "max": mean + 1,
                    "min": mean - 1, "std": 1.0, "episodes": 50}) + "\n"
        for i, (t, mean) in enumerate(evals, start=1)))
    return path
