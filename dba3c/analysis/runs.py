"""Run directories as the analysis reads them: their contents (:class:`Run`), which runs are
seeds of one experiment (:func:`seed_groups`), how many data points and frames a run used
(:func:`cumulative`), and statistics over seeds (:func:`spread`, :func:`seed_curve`).

Runs are seeds of one experiment when their resolved configs (``config.yaml``) are equal
once the keys in :data:`NOT_LEARNING` are left out: where a run is written, its seed, how it
is logged and when it stops change nothing it learns up to any point of its curve.

Everything but :func:`load_run` and :func:`load_runs` is pure.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import mean
from typing import Any, NamedTuple

import numpy as np

from dba3c.training.rundir import METRICS, RunDir

# config keys (a whole section, or section.key) that do not change what a run learns (and
# may be missing from the config of a run written before they existed)
NOT_LEARNING = ("run", "train.max_seconds", "eval.stop_at_target", "eval.probe_frames",
                "eval.stop_if_dead", "env.nice")


@dataclass(frozen=True)
class Run:
    """The contents of one run directory.

    ``name`` is the directory's name (``parent/name`` where two runs read together share
    it), ``path`` the directory, ``config`` the nested resolved config, ``metrics`` and
    ``evals`` the records of ``metrics.jsonl`` and ``eval.jsonl`` (empty when absent) and
    ``summary`` the object in ``summary.json`` (empty when absent).
    """

    name: str
    path: Path
    config: dict
    metrics: list[dict]
    evals: list[dict]
    summary: dict


def load_run(run_dir: str | Path) -> Run:
    """Read a run directory (``metrics.jsonl`` required; ``config.yaml``, ``eval.jsonl`` and
    ``summary.json`` optional). Raises ValueError for a missing or malformed file."""
    run = RunDir(run_dir)
    if not run.is_run():
        raise ValueError(f"{run_dir}: not a run directory (no {METRICS})")
    path = run.path.resolve()
    return Run(name=path.name, path=path, config=run.read_config(),
               metrics=run.read_metrics(), evals=run.read_evals(), summary=run.read_summary())


def load_runs(run_dirs: Sequence[str | Path]) -> list[Run]:
    """Each directory once (:func:`load_run`); runs whose names clash are named
    ``parent/name``."""
    unique = list(dict.fromkeys(Path(path).resolve() for path in run_dirs))
    runs = [load_run(path) for path in unique]
    clashes = Counter(run.name for run in runs)
    return [replace(run, name=f"{run.path.parent.name}/{run.name}") if clashes[run.name] > 1
            else run for run in runs]


def config_value(config: dict, dotted: str) -> Any:
    """``config['a']['b']`` for ``'a.b'``; None where a key is missing."""
    node: Any = config
    for key in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def flat_config(config: dict, prefix: str = "") -> dict[str, Any]:
    """The nested config as ``{'section.key': value}``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= flat_config(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def learning_config(config: dict) -> dict[str, Any]:
    """The flat config without the keys of :data:`NOT_LEARNING`."""
    return {key: value for key, value in flat_config(config).items()
            if not any(key == k or key.startswith(k + ".") for k in NOT_LEARNING)}


def seed_groups(runs: list[Run]) -> list[list[Run]]:
    """The runs grouped by :func:`learning_config` (so by game too), groups and runs in order
    of first appearance. A run without ``config.yaml`` is a group of its own."""
    groups: dict[Any, list[Run]] = {}
    for run in runs:
        config = learning_config(run.config)
        key = repr(sorted(config.items())) if config else run.path
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def group_label(runs: list[Run]) -> str:
    """A seed group's name: its runs' common parent directory when they share one (e.g.
    ``breakout_64`` for ``runs/paper/breakout_64/seed0``, ``seed1``, ...), else the start
    their names share, when it is one of them or ends at a ``-``, ``_`` or ``.`` (``pong``
    for ``pong`` and ``pong-seed1``, ``pong_64`` for ``pong_64_s0`` and ``pong_64_s1``, none
    for ``run10`` and ``run11``), else their names joined by ``+``; a single run's name."""
    parents, names = {run.path.parent for run in runs}, [run.name for run in runs]
    if len(runs) > 1 and len(parents) == 1:
        return parents.pop().name
    shared = os.path.commonprefix(names)
    if shared not in names:
        shared = shared[:max(0, *map(shared.rfind, "-_."))]
    return shared.rstrip("-_.") or "+".join(names)


def cumulative(metrics: list[dict], rate: str) -> list[float]:
    """The running total of a rate at each metrics record: ``sum_{j <= i} rate_j (t_j -
    t_{j-1})`` with ``t_0 = 0`` (each line's rate is over the time since the line before;
    a missing rate counts as 0). E.g. ``perf/env_frames_per_s``: the frames emulated."""
    totals, total, previous = [], 0.0, 0.0
    for record in metrics:
        total += (record.get(rate) or 0.0) * (record["time_s"] - previous)
        previous = record["time_s"]
        totals.append(total)
    return totals


def totals_at(metrics: list[dict], rate: str, steps: Sequence[float]) -> list[float]:
    """The running total of ``rate`` (:func:`cumulative`) at each of ``steps``, linear
    between the metrics records' steps from 0 at step 0, the last total past the last
    record."""
    logged = [record["step"] for record in metrics]
    return np.interp(steps, [0, *logged], [0.0, *cumulative(metrics, rate)]).tolist()


def ended_at_target(run: Run) -> bool:
    """Whether the run stopped because it reached its target: ``eval.stop_at_target`` is set
    and its last evaluation's mean is at least ``eval.target_score``. Its final policy then
    keeps that score: after its end it counts with its last evaluation."""
    target = config_value(run.config, "eval.target_score")
    return bool(config_value(run.config, "eval.stop_at_target")) and bool(run.evals) and \
        target is not None and run.evals[-1]["mean"] >= target


class Spread(NamedTuple):
    """A quantity over seeds: the mean, the smallest and largest value, and how many."""

    mean: float
    low: float
    high: float
    n: int


def spread(values: Sequence[float | None]) -> Spread | None:
    """:class:`Spread` of the values that are not None; None when there are none."""
    known = [v for v in values if v is not None]
    return Spread(mean(known), min(known), max(known), len(known)) if known else None


def hold(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """A curve's value at ``x``: the y of its last point at or before ``x`` (``xs``
    ascending, ``x >= xs[0]``)."""
    return ys[int(np.searchsorted(xs, x, side="right")) - 1]


def seed_curve(curves: Sequence[tuple[Sequence[float], Sequence[float]]],
               held: Sequence[bool]) -> list[tuple[float, Spread]]:
    """Seeds' curves ``(xs, ys)`` (``xs`` ascending) on one grid: at each x of any curve,
    the :class:`Spread` of the curves present there, each at its last point at or before
    x (:func:`hold`).

    A curve is present from its first x to its last, or to the grid's end where ``held``
    says so (a seed that ended at its target keeps its final score). So ``n`` counts the
    seeds behind each point; a curve with no points is never present.
    """
    points = []
    for x in sorted({x for xs, _ in curves for x in xs}):
        stats = spread([hold(xs, ys, x) for (xs, ys), keep in zip(curves, held)
                        if len(xs) and xs[0] <= x and (keep or x <= xs[-1])])
        assert stats is not None, "x is a point of a curve, which is present there"
        points.append((x, stats))
    return points
