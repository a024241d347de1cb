"""The paper's figures from run and sweep directories, each as a PNG with its data as CSV.

Every figure is drawn from a table (a list of dict rows), and that same table is written
next to the picture as ``NAME.csv``, so the numbers behind a figure can be read without it.
Building tables and figures is pure (figures are :class:`matplotlib.figure.Figure` objects,
rendered with Agg, never shown); :func:`write_outputs` and :func:`plot_command` do the I/O.

Figures, by file stem:

* from runs: ``eval_vs_time``, ``eval_vs_step``, ``eval_vs_frames``,
  ``eval_vs_data_points``, ``hns_vs_time``,
  ``online_score``, ``online_vs_step``, ``throughput``, and ``sync_vs_async`` (paper fig. 3)
  when runs of both ``dist.mode`` values are present. Runs that differ only by seed
  (:func:`dba3c.analysis.runs.seed_groups`) are one curve: their mean with a min-max band,
  the seed count in the legend (:func:`curve_table`). A learning curve's table that this
  module wrote (``NAME.csv``) can be read back and drawn again with other runs
  (:func:`read_curve_table`), the runs it records grouped by name
  (:func:`recorded_curve_table`): the record of runs whose directories are gone;
* from a sweep's ``sweep.csv``: ``time_to_target_vs_workers`` and ``throughput_vs_workers``
  (with the ideal linear scaling line), ``throughput_vs_hidden`` (paper fig. 6) and
  ``throughput_vs_ps`` (paper fig. 7), each only when its grid column varies in the sweep;
* from ``dba3c bench scale``'s ``scale.json`` (emulated cluster):
  ``scale_efficiency_vs_workers`` (with the ideal E = 1), ``scale_throughput_vs_ps`` and
  ``scale_throughput_vs_hidden`` at the largest W, one series per link rate (and P).

A figure whose table has no rows (e.g. no evaluation has finished yet) is left out.
"""

from __future__ import annotations

import csv
import fnmatch
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import mean
from typing import Any, NamedTuple

from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, NullLocator

from dba3c.analysis.figure8 import (
    Seed,
    draw_figure8,
    effective_batch,
    efficiency_by_workers,
    figure8_table,
    first_reaching,
    run_seeds,
    run_workers,
)
from dba3c.analysis.runs import (
    Run,
    config_value,
    ended_at_target,
    group_label,
    load_runs,
    seed_curve,
    seed_groups,
    totals_at,
)
from dba3c.outputs import make_output_dir
from dba3c.training.rundir import METRICS, RESULT_COLUMNS, SWEEP_CSV, RunDir, SweepDir

Table = list[dict]

# sweep.csv columns that are not grid keys
_SWEEP_RESULTS = ("run_dir", *RESULT_COLUMNS)
# grid keys that repeat a configuration rather than change it: averaged, not a series
_REPEAT_KEYS = ("run.seed",)


class _Curve(NamedTuple):
    """How to tabulate and draw a learning curve: x column, y columns (solid, then dashed;
    all from the same records, :data:`_COLUMNS`), labels."""

    x: str
    ys: tuple[str, ...]
    xlabel: str
    ylabel: str
    title: str


class _Scaling(NamedTuple):
    """How to tabulate and draw a sweep figure; ``ideal(y0, x0, x)`` is the ideal linear
    value at ``x`` given the measurement ``y0`` at the smallest ``x0`` (None: no ideal)."""

    x: str
    y: str
    ideal: Callable[[float, float, float], float] | None
    xlabel: str
    ylabel: str
    title: str


_MINUTES = "wall time [min]"
_UPDATES = "global step [updates]"
_EVAL_SCORE = "eval score [points/episode] (solid: mean, dashed: max)"
_ONLINE_SCORE = "online score [points/episode]"
_THROUGHPUT = "throughput [data points/s]"
_FRAMES_RATE = "perf/env_frames_per_s"

# a learning-curve column: the records of a run it comes from, and its key in them
_COLUMNS = {"eval_mean": ("evals", "mean"), "eval_max": ("evals", "max"), "hns": ("evals", "hns"),
            "online_score": ("metrics", "train/online_score"),
            "data_points_per_s": ("metrics", "perf/data_points_per_s")}

_CURVES = {
    "eval_vs_time": _Curve("minutes", ("eval_mean", "eval_max"), _MINUTES, _EVAL_SCORE,
                           "Evaluation score vs wall time"),
    "eval_vs_step": _Curve("step", ("eval_mean", "eval_max"), _UPDATES, _EVAL_SCORE,
                           "Evaluation score vs global step"),
    "eval_vs_frames": _Curve("frames", ("eval_mean", "eval_max"),
                             "training frames [emulator frames, all workers]", _EVAL_SCORE,
                             "Evaluation score vs training frames"),
    # the x of the data points a setting needs to reach a score (figure8): batches of W
    # workers x b data points compared per data point
    "eval_vs_data_points": _Curve("data_points", ("eval_mean", "eval_max"),
                                  "data points trained on [updates x workers x mini-batch]",
                                  _EVAL_SCORE, "Evaluation score vs data points"),
    "hns_vs_time": _Curve("minutes", ("hns",), _MINUTES,
                          "human-normalized score (0: random, 1: human)",
                          "Human-normalized evaluation score vs wall time"),
    "online_score": _Curve("minutes", ("online_score",), _MINUTES, _ONLINE_SCORE,
                           "Training (online) score"),
    # runs on machines of different speeds (or one machine on different days) compared per
    # update rather than per minute
    "online_vs_step": _Curve("step", ("online_score",), _UPDATES, _ONLINE_SCORE,
                             "Training (online) score vs global step"),
    "throughput": _Curve("minutes", ("data_points_per_s",), _MINUTES, _THROUGHPUT,
                         "Training throughput"),
}

_SCALING = {
    "time_to_target_vs_workers": _Scaling(
        "dist.workers", "time_to_target_s", lambda y0, x0, x: y0 * x0 / x,
        "workers", "time to target score [s]", "Time to target score vs workers"),
    "throughput_vs_workers": _Scaling(
        "dist.workers", "data_points_per_s", lambda y0, x0, x: y0 * x / x0,
        "workers", _THROUGHPUT, "Throughput vs workers"),
    "throughput_vs_hidden": _Scaling(
        "model.hidden", "data_points_per_s", None,
        "hidden units (model.hidden)", _THROUGHPUT, "Throughput vs model size"),
    "throughput_vs_ps": _Scaling(
        "dist.ps", "data_points_per_s", None,
        "parameter servers (dist.ps)", _THROUGHPUT, "Throughput vs parameter servers"),
}

# dba3c bench scale figures: x and y are keys of scale.json's points
_SCALE = {
    "scale_efficiency_vs_workers": _Scaling(
        "workers", "efficiency", lambda y0, x0, x: 1.0, "workers W",
        "scaling efficiency E = T_c / T_step", "Scaling efficiency vs workers (emulated)"),
    "scale_throughput_vs_ps": _Scaling(
        "ps", "data_points_per_s", None, "parameter servers P", _THROUGHPUT,
        "Throughput vs parameter servers (emulated)"),
    "scale_throughput_vs_hidden": _Scaling(
        "hidden", "data_points_per_s", None, "hidden units (FC)", _THROUGHPUT,
        "Throughput vs model size (emulated)"),
}

# ---- tables -------------------------------------------------------------------------------


def _run_rows(run: Run, spec: _Curve) -> Table:
    """One row (step, minutes, frames or data points when they are the x, then the y
    columns) per record of the run that has a step, a time and every y column. ``frames``
    are the training frames at the record's step (:func:`dba3c.analysis.runs.totals_at`),
    ``data_points`` the step x its effective batch
    (:func:`dba3c.analysis.figure8.effective_batch`; no rows where the config does not say
    ``train.batch_size``), then its ``workers`` W, which a predicted Figure 8 reads back
    (:func:`recorded_seeds`)."""
    source = _COLUMNS[spec.ys[0]][0]
    rows = []
    for record in getattr(run, source):
        values = {y: record.get(_COLUMNS[y][1]) for y in spec.ys}
        if record.get("step") is None or record.get("time_s") is None or \
                None in values.values():
            continue
        rows.append({"step": record["step"], "minutes": record["time_s"] / 60, **values})
    if spec.x == "frames":
        frames = totals_at(run.metrics, _FRAMES_RATE, [row["step"] for row in rows])
        rows = [{"step": row.pop("step"), "minutes": row.pop("minutes"), "frames": f, **row}
                for row, f in zip(rows, frames)]
    elif spec.x == "data_points":
        if config_value(run.config, "train.batch_size") is None:
            return []
        batch, workers = effective_batch(run.config), run_workers(run.config)
        rows = [{"step": row["step"], "data_points": row["step"] * batch, "workers": workers,
                 **row} for row in rows]
    return rows


def _seed_rows(runs: list[Run], spec: _Curve) -> Table:
    """The seeds of one experiment as one curve (:func:`dba3c.analysis.runs.seed_curve`):
    rows of ``run`` (the group's label and seed count, or its run count where a seed
    repeats), ``seeds`` (present at this x), the x, and for each y column its mean over
    those seeds, ``<y>_min`` and ``<y>_max``. In evaluation curves a seed that ended at its
    target keeps its last score to the end."""
    per_run = [_run_rows(run, spec) for run in runs]
    held = [_held(run, spec) for run in runs]
    distinct = len({config_value(run.config, "run.seed") for run in runs}) == len(runs)
    label = f"{group_label(runs)} ({len(runs)} {'seeds' if distinct else 'runs'})"
    return _spread_rows(label, per_run, held, spec)


def _spread_rows(label: str, per_run: list[Table], held: list[bool], spec: _Curve) -> Table:
    """Seeds' rows (``per_run``, each with the x and y columns of ``spec``) as one curve
    called ``label`` (:func:`dba3c.analysis.runs.seed_curve`, ``held``: the seeds that keep
    their last value to the end), in :func:`_seed_rows`' columns."""
    curves = {y: seed_curve([(_column(rows, spec.x), _column(rows, y)) for rows in per_run],
                            held) for y in spec.ys}
    table = []
    for points in zip(*curves.values()):
        row = {"run": label, "seeds": points[0][1].n, spec.x: points[0][0]}
        for y, (_, stats) in zip(spec.ys, points):
            row |= {y: stats.mean, f"{y}_min": stats.low, f"{y}_max": stats.high}
        table.append(row)
    return table


def _held(run: Run, spec: _Curve) -> bool:
    """Whether the run keeps its last value to the end of a curve of seeds: an evaluation
    curve's run that ended at its target (:func:`dba3c.analysis.runs.ended_at_target`)."""
    return _COLUMNS[spec.ys[0]][0] == "evals" and ended_at_target(run)


def curve_table(runs: list[Run], spec: _Curve) -> Table:
    """One learning curve's table: a run alone as its rows (:func:`_run_rows`, with column
    ``run`` its name first, and ``ended_at_target`` 1 where it keeps its last value in a
    curve of seeds, :func:`_held`, so that the table read back says so too), the seeds of
    one experiment (:func:`dba3c.analysis.runs.seed_groups`) as one curve
    (:func:`_seed_rows`)."""
    table = []
    for group in seed_groups(runs):
        if len(group) == 1:
            mark = {"ended_at_target": 1} if _held(group[0], spec) else {}
            table += [{"run": group[0].name, **row, **mark}
                      for row in _run_rows(group[0], spec)]
        else:
            table += _seed_rows(group, spec)
    return table


def learning_curve_tables(runs: list[Run],
                          recorded: dict[str, Table] | None = None) -> dict[str, Table]:
    """The tables behind :func:`learning_curves`, by figure name (empty ones left out).

    Columns of a run's rows: ``run``, ``step``, ``minutes`` (and ``frames``), then
    ``eval_mean`` and ``eval_max`` (eval figures), ``hns`` (Atari-57 games only),
    ``online_score`` or ``data_points_per_s``; runs that differ only by seed share one
    curve (:func:`curve_table`). ``recorded``: runs read back from curve tables, by figure
    name (:func:`read_curve_table`), drawn after the runs (:func:`recorded_curve_table`).
    Raises ValueError where a recorded curve and a run's curve have one name.
    """
    tables = {}
    for name, spec in _CURVES.items():
        live = curve_table(runs, spec)
        kept = recorded_curve_table((recorded or {}).get(name, []), spec)
        clash = set(_groups(live, "run")) & set(_groups(kept, "run"))
        if clash:
            raise ValueError(f"{name}: {', '.join(sorted(clash))} is both a run directory's "
                             "curve and a recorded one; give one of them")
        tables[name] = live + kept
    return {name: table for name, table in tables.items() if table}


# a recorded run's seed at the end of its name: w1-s0, pong-seed2, breakout_64/seed1
_SEED_MARK = re.compile(r"(?:^|[-_./])s(?:eed)?\d+$")


def recorded_group(label: str) -> str:
    """The experiment a run recorded in a curve table belongs to: its name without a seed
    at its end (``w1-s0`` and ``w1-s1``: ``w1``; ``pong``, ``pong-seed1``: ``pong``)."""
    return _SEED_MARK.sub("", label) or label


def recorded_curve_table(rows: Table, spec: _Curve) -> Table:
    """Runs recorded in curve tables (rows of :func:`read_curve_table`) as
    :func:`curve_table` draws runs: a run alone as its rows, the runs of one
    :func:`recorded_group` (seeds of one experiment) as one curve, ``NAME (N seeds)``. A
    recorded run whose rows say ``ended_at_target`` keeps its last value to the curve's
    end; any other counts up to its last row."""
    groups: dict[str, list[Table]] = {}
    for label, run_rows in _groups(rows, "run").items():
        groups.setdefault(recorded_group(label), []).append(run_rows)
    table: Table = []
    for name, per_run in groups.items():
        if len(per_run) == 1:
            table += per_run[0]
        else:
            held = [bool(rows[-1].get("ended_at_target")) for rows in per_run]
            table += _spread_rows(f"{name} ({len(per_run)} seeds)", per_run, held, spec)
    return table


def recorded_seeds(rows: Table, score: float) -> list[list[Seed]]:
    """Runs recorded in an ``eval_vs_data_points`` table (rows of :func:`read_curve_table`)
    as the predicted Figure 8's seeds, the runs of one :func:`recorded_group` together: W
    from the ``workers`` column, the effective batch from data points / step, the data
    points of the first evaluation at ``score`` or above
    (:func:`dba3c.analysis.figure8.first_reaching`), and those of the last as the data
    points trained. Raises ValueError naming a run whose rows have no ``workers`` (tables
    written before that column; :func:`_run_rows`)."""
    groups: dict[str, list[Seed]] = {}
    for label, run_rows in _groups(rows, "run").items():
        if any("workers" not in row for row in run_rows):
            raise ValueError(f"run {label}: its eval_vs_data_points rows have no workers "
                             "column, which the predicted Figure 8 needs; draw its table "
                             "again from its run directory")
        trained = [row for row in run_rows if row["step"] > 0]
        if not trained:
            raise ValueError(f"run {label}: no evaluation after step 0, so no data points "
                             "a step")
        reached = first_reaching(((row["data_points"], row["eval_mean"]) for row in run_rows),
                                 score)
        groups.setdefault(recorded_group(label), []).append(Seed(
            trained[0]["workers"], trained[0]["data_points"] // trained[0]["step"], reached,
            run_rows[-1]["data_points"]))
    return list(groups.values())


def sync_vs_async_table(runs: list[Run]) -> Table:
    """The table behind :func:`sync_vs_async`: columns ``mode`` (``dist.mode``), ``run``,
    ``step``, ``minutes``, ``online_score``; empty unless both modes have scores."""
    rows = []
    for run in runs:
        mode = config_value(run.config, "dist.mode")
        if mode in ("sync", "async"):
            rows += [{"mode": mode, "run": run.name, **row}
                     for row in _run_rows(run, _CURVES["online_score"])]
    return rows if {row["mode"] for row in rows} == {"sync", "async"} else []


def _number(value: str | None, column: str) -> int | float | None:
    """A sweep.csv cell as int or float; None when empty."""
    if value is None or value == "":
        return None
    number = _cell(value, column)
    return int(number) if float(number).is_integer() else number


def scaling_tables(rows: list[dict]) -> dict[str, Table]:
    """The tables behind :func:`scaling_figures`, by figure name, from sweep.csv rows.

    Only rows with status ``ok`` and a value in the measured column count, and a figure is
    made only if its grid column takes several values among them. Each other varying grid
    key (except ``run.seed``) splits the points into series, labelled like
    ``"model.hidden=256"`` (``""`` when there is one series); rows with the same series and
    x value are averaged (``runs`` counts them). The workers figures add ``ideal_linear``:
    the series' value at its smallest worker count, scaled linearly.
    """
    ok = [row for row in rows if row.get("status") == "ok"]
    grid = [key for key in dict.fromkeys(k for row in rows for k in row)
            if key not in _SWEEP_RESULTS]
    tables = {}
    for name, spec in _SCALING.items():
        measured = [row for row in ok if _number(row.get(spec.x), spec.x) is not None
                    and _number(row.get(spec.y), spec.y) is not None]
        varying = [key for key in grid if len({str(row.get(key)) for row in measured}) > 1]
        if spec.x not in varying:
            continue
        series_keys = [key for key in varying if key != spec.x and key not in _REPEAT_KEYS]
        points: dict[str, dict[float, list[float]]] = {}
        for row in measured:
            series = ", ".join(f"{key}={row.get(key)}" for key in series_keys)
            x, y = _number(row[spec.x], spec.x), _number(row[spec.y], spec.y)
            assert x is not None and y is not None, "measured rows have both"
            points.setdefault(series, {}).setdefault(x, []).append(y)
        table = []
        for series, by_x in points.items():
            x0 = min(by_x)
            for x in sorted(by_x):
                entry = {"series": series, spec.x: x, spec.y: mean(by_x[x]), "runs": len(by_x[x])}
                if spec.ideal:
                    entry["ideal_linear"] = spec.ideal(mean(by_x[x0]), x0, x)
                table.append(entry)
        tables[name] = table
    return tables


def scale_mode(point: dict) -> str:
    """How a scale point aggregates: ``P=4`` (parameter servers), ``collective, serial`` or
    ``collective, overlapped``, then :func:`wire_label`."""
    if point.get("aggregation") == "collective":
        mode = "collective, overlapped" if point.get("overlap") else "collective, serial"
    else:
        mode = f"P={point['ps']}"
    return mode + wire_label(point)


def wire_label(point: dict) -> str:
    """How a scale point's gradients travel, as a series label's tail: nothing for float32
    (also a point measured before ``--wire-dtype`` existed), ``, bfloat16 on the wire``."""
    dtype = point.get("wire_dtype", "float32")
    return "" if dtype == "float32" else f", {dtype} on the wire"


def scale_tables(results: dict) -> dict[str, Table]:
    """The tables behind the ``scale_*`` figures from ``dba3c bench scale`` results.

    Only measured points without backup workers or stragglers count. Efficiency vs W takes
    the FC 128 points, one series per link rate and mode (:func:`scale_mode`: P, or
    collective), with ``ideal_linear`` E = 1; throughput vs P the ``ps`` points at FC 128
    and the largest W and throughput vs FC those at the largest W and P = 4, one series per
    link rate; points whose gradients travel in bfloat16 are series of their own
    (:func:`wire_label`). A point measured more than once (the same series and x, e.g. from
    several results files) is their mean (``runs``: how many). Each row also gives the
    analytic model's value (``model_*``) and the point's time scale. A figure is made only if
    its x takes several values.
    """
    plain = [p for p in results["points"]
             if "error" not in p and not p["replicas"] and not p["slow_workers"]]
    top = max((p["workers"] for p in plain), default=0)
    selections = {
        "scale_efficiency_vs_workers": (
            [p for p in plain if p["hidden"] == 128],
            lambda p: f"{p['link_gbit']} Gb/s, {scale_mode(p)}"),
        "scale_throughput_vs_ps": (
            [p for p in plain if p["hidden"] == 128 and p["workers"] == top
             and p.get("aggregation") != "collective"],
            lambda p: f"W={top}, {p['link_gbit']} Gb/s, FC 128{wire_label(p)}"),
        "scale_throughput_vs_hidden": (
            [p for p in plain if p["workers"] == top and p["ps"] == 4],
            lambda p: f"W={top}, P=4, {p['link_gbit']} Gb/s{wire_label(p)}"),
    }
    tables = {}
    for name, (points, series) in selections.items():
        spec = _SCALE[name]
        if len({p[spec.x] for p in points}) < 2:
            continue
        repeats: dict[tuple[str, Any], list[dict]] = {}
        for p in sorted(points, key=lambda p: (series(p), p[spec.x])):
            repeats.setdefault((series(p), p[spec.x]), []).append(p)
        table = []
        for (label, x), same in repeats.items():
            y = mean([p[spec.y] for p in same])
            model = mean([p[spec.y] * p["step_ms"] / p["model_step_ms"]  # both go as 1 / T
                          for p in same])
            entry = {"series": label, spec.x: x, spec.y: y, f"model_{spec.y}": model,
                     "time_scale": same[0]["time_scale"], "runs": len(same)}
            if spec.ideal:
                entry["ideal_linear"] = spec.ideal(y, x, x)
            table.append(entry)
        tables[name] = table
    return tables


# ---- figures ------------------------------------------------------------------------------


def _axes(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Any]:
    """A new figure with one set of labelled axes."""
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.add_subplot()
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _groups(table: Table, key: str) -> dict[str, Table]:
    """The rows of ``table`` grouped by ``row[key]``, in order of first appearance."""
    groups: dict[str, Table] = {}
    for row in table:
        groups.setdefault(row[key], []).append(row)
    return groups


def _column(rows: Table, key: str) -> list:
    return [row[key] for row in rows]


def _draw_curves(table: Table, spec: _Curve) -> Figure:
    """One colour per run or group of seeds; the first y column solid and in the legend, the
    second dashed; a group of seeds is its mean, with the first column's min-max band."""
    figure, axes = _axes(spec.title, spec.xlabel, spec.ylabel)
    for index, (run, rows) in enumerate(_groups(table, "run").items()):
        xs, colour = _column(rows, spec.x), f"C{index % 10}"
        for y, style in zip(spec.ys, ("-", "--")):
            axes.plot(xs, _column(rows, y), style, color=colour,
                      label=run if style == "-" else "_nolegend_")
        if "seeds" in rows[0]:
            y = spec.ys[0]
            axes.fill_between(xs, _column(rows, f"{y}_min"), _column(rows, f"{y}_max"),
                              color=colour, alpha=0.2, linewidth=0)
    axes.legend(fontsize="small")
    return figure


def _draw_scaling(table: Table, spec: _Scaling) -> Figure:
    """Measured points joined by lines, one colour per series, the ideal line dotted:
    log-log axes when there is an ideal line; one black line over every x when each series'
    ideal is the same constant (efficiency: E = 1), with a linear y axis from 0."""
    figure, axes = _axes(spec.title, spec.xlabel, spec.ylabel)
    constant = spec.ideal is not None and len({row["ideal_linear"] for row in table}) == 1
    for index, (series, rows) in enumerate(_groups(table, "series").items()):
        xs, colour = _column(rows, spec.x), f"C{index % 10}"
        axes.plot(xs, _column(rows, spec.y), "o-", color=colour, label=series or "measured")
        if spec.ideal and not constant:
            axes.plot(xs, _column(rows, "ideal_linear"), ":", color=colour,
                      label=f"ideal linear ({series})" if series else "ideal linear")
    if spec.ideal:
        axes.set_xscale("log", base=2)
    if constant:
        xs = sorted({row[spec.x] for row in table})
        axes.plot(xs, [table[0]["ideal_linear"]] * len(xs), ":", color="black",
                  label="ideal linear")
        axes.set_ylim(0, 1.05 * max(table[0]["ideal_linear"], *_column(table, spec.y)))
    elif spec.ideal:
        axes.set_yscale("log")
        axes.yaxis.set_major_formatter(LogFormatter())  # plain numbers, not 6x10^1
        axes.yaxis.set_minor_formatter(LogFormatter())
    ticks = sorted({row[spec.x] for row in table})
    axes.set_xticks(ticks, [str(tick) for tick in ticks])
    axes.xaxis.set_minor_locator(NullLocator())
    axes.legend(fontsize="small")
    return figure


def _draw_sync_vs_async(table: Table) -> Figure:
    """One line per run, coloured by mode and labelled by it (with the run's name when a
    mode has several runs)."""
    figure, axes = _axes("Synchronous vs asynchronous updates", _MINUTES,
                         "online score [points/episode]")
    runs = _groups(table, "run")
    runs_per_mode = Counter(rows[0]["mode"] for rows in runs.values())
    for run, rows in runs.items():
        mode = rows[0]["mode"]
        axes.plot(_column(rows, "minutes"), _column(rows, "online_score"),
                  color="C0" if mode == "sync" else "C1",
                  label=mode if runs_per_mode[mode] == 1 else f"{mode} ({run})")
    axes.legend(fontsize="small")
    return figure


def draw_figure(name: str, table: Table) -> Figure:
    """The figure called ``name`` (a learning-curve, scaling or ``sync_vs_async`` figure)
    drawn from its table. Raises ValueError for an unknown name."""
    if name in _CURVES:
        return _draw_curves(table, _CURVES[name])
    if name in _SCALING:
        return _draw_scaling(table, _SCALING[name])
    if name in _SCALE:
        return _draw_scaling(table, _SCALE[name])
    if name == "sync_vs_async":
        return _draw_sync_vs_async(table)
    raise ValueError(f"unknown figure {name!r}; known: "
                     f"{', '.join([*_CURVES, *_SCALING, *_SCALE, 'sync_vs_async'])}")


def learning_curves(runs: list[Run]) -> dict[str, Figure]:
    """Figures ``eval_vs_time``, ``eval_vs_step``, ``eval_vs_frames`` and
    ``eval_vs_data_points`` (eval mean solid, max dashed), ``hns_vs_time`` (the
    human-normalized eval mean, for Atari-57 games), ``online_score`` and ``throughput`` (vs
    wall minutes), ``online_vs_step`` (the online score vs updates), one colour per run; runs
    that differ only by seed as their mean with a min-max band, the seed count in the
    legend."""
    return {name: draw_figure(name, table)
            for name, table in learning_curve_tables(runs).items()}


def scaling_figures(rows: list[dict]) -> dict[str, Figure]:
    """Figures from sweep.csv rows: ``time_to_target_vs_workers``, ``throughput_vs_workers``
    (with the ideal linear line), ``throughput_vs_hidden`` and ``throughput_vs_ps``, each
    only when its grid column varies (see :func:`scaling_tables`)."""
    return {name: draw_figure(name, table) for name, table in scaling_tables(rows).items()}


def sync_vs_async(runs: list[Run]) -> Figure | None:
    """Online score vs wall minutes for sync and async runs (paper fig. 3); None unless
    runs of both modes have online scores."""
    table = sync_vs_async_table(runs)
    return draw_figure("sync_vs_async", table) if table else None


# ---- output -------------------------------------------------------------------------------


def write_outputs(figures_and_tables: dict[str, tuple[Figure, Table]],
                  out_dir: str | Path) -> list[Path]:
    """Write ``NAME.png`` (120 dpi) and ``NAME.csv`` (columns in order of first appearance,
    empty cells for missing values) for each entry; return the files written."""
    out_dir = make_output_dir(out_dir, f"--out {out_dir}")
    written = []
    for name, (figure, table) in figures_and_tables.items():
        png, table_path = out_dir / f"{name}.png", out_dir / f"{name}.csv"
        figure.savefig(png, dpi=120)
        write_csv(table_path, table)
        written += [png, table_path]
    return written


def _cell(value: str, column: str) -> int | float:
    """A curve table's cell as :func:`write_csv` wrote it: int where it is one (``3000``),
    else float (``-21.0``)."""
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"column {column}: {value!r} is not a number") from None


def read_curve_table(path: Path) -> tuple[str, Table]:
    """A learning curve's table as :func:`write_outputs` wrote it, to be drawn again: the
    figure's name (the file's, ``eval_vs_data_points.csv``: ``eval_vs_data_points``) and its
    rows, numbers as written (:func:`_cell`), empty cells left out. Only a table of single
    runs can be read: one that draws seeds as their mean has lost the seeds. Raises
    ValueError naming the file and what is wrong with it."""
    if path.stem not in _CURVES:
        raise ValueError(f"{path}: not a learning curve's table (its name is one of "
                         f"{', '.join(f'{name}.csv' for name in _CURVES)})")
    spec = _CURVES[path.stem]
    try:
        with open(path, newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            columns = reader.fieldnames or []
            missing = [c for c in ("run", spec.x, *spec.ys) if c not in columns]
            if missing:
                raise ValueError(f"no column {', '.join(missing)}")
            if "seeds" in columns:
                raise ValueError("its curves are means over seeds; give a table of single "
                                 "runs (runs whose seeds were drawn apart)")
            table = []
            for line, row in enumerate(reader, start=2):
                if None in row:
                    raise ValueError(f"line {line}: more cells than columns")
                try:
                    table.append({"run": row["run"], **{
                        key: _cell(value, key) for key, value in row.items()
                        if key != "run" and value}})
                except ValueError as e:
                    raise ValueError(f"line {line}, {e}") from None
    except (OSError, UnicodeDecodeError, csv.Error, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None
    return path.stem, table


def write_csv(path: Path, table: Table) -> None:
    """Write a table as CSV: columns in order of first appearance, empty cells for missing
    values."""
    columns = list(dict.fromkeys(key for row in table for key in row))
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(table)


def chosen(name: str, patterns: Sequence[str]) -> bool:
    """Whether a run's name matches one of the shell ``patterns`` (``w1-*``; a run read
    together with another of its name is ``parent/name``, which ``*/name`` matches)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


class Figure8(NamedTuple):
    """What ``dba3c plot --score S --node-rate R`` predicts the paper's Figure 8 with
    (:mod:`dba3c.analysis.figure8`): the score, one node's data points/s, and which scale
    points give E(W)."""

    score: float
    node_rate: float
    link_gbit: float = 10.0
    hidden: int = 128


def plot_command(paths: list, out_dir: str | Path, figure8: Figure8 | None = None,
                 only: Sequence[str] = ()) -> list[Path]:
    """``dba3c plot PATH... --out DIR``: all figures (PNG + CSV) for run and sweep
    directories; returns the files written.

    A run directory has ``metrics.jsonl``; a sweep directory has ``sweep.csv``, and its
    ``ok`` runs join the learning curves and the sync-vs-async figure; a ``.json`` file is
    the results of ``dba3c bench scale``; a ``.csv`` file is a learning curve's table this
    module wrote, whose runs are drawn again (:func:`read_curve_table`; a run in two tables
    of one figure is refused). With several sweeps, each one's figures are
    prefixed with its directory name; several scale results are drawn together (e.g. a
    ``ps`` run and a collective run in one efficiency figure; a point in several, their
    mean). With ``figure8``, also ``figure8_predicted``: time to its score against workers
    from the runs (their W: :func:`dba3c.analysis.figure8.run_workers`) and the scale
    results' E(W). ``only``: shell patterns; where given, the learning curves and the
    predicted Figure 8 take only the runs whose name (a run directory's, or a recorded run's)
    matches one of them (:func:`chosen`). Raises ValueError naming a path that is none of
    these, or the patterns where no run matches them.
    """
    from dba3c.training.rundir import read_scale_results

    run_dirs, sweeps, scales = [], [], []
    recorded: dict[str, Table] = {}
    recorded_in: dict[tuple[str, str], Path] = {}  # (figure, run): the table it came from
    tables_read: set[Path] = set()
    for path in map(Path, paths):
        if path.suffix == ".csv" and path.is_file():
            if path.resolve() in tables_read:
                continue  # one table given twice
            tables_read.add(path.resolve())
            name, rows = read_curve_table(path)
            for run in _groups(rows, "run"):
                if (name, run) in recorded_in:
                    raise ValueError(f"{path}: run {run} is in {recorded_in[name, run]} too")
                recorded_in[name, run] = path
            recorded.setdefault(name, []).extend(rows)
        elif RunDir(path).is_run():
            run_dirs.append(path)
        elif SweepDir(path).is_sweep():
            rows = SweepDir(path).read_rows()
            sweeps.append((path, rows))
            run_dirs += [path / row["run_dir"] for row in rows if row["status"] == "ok"]
        elif path.suffix == ".json" and path.is_file():
            scales.append((path, read_scale_results(path)))
        else:
            raise ValueError(f"{path}: expected a run directory (with {METRICS}), a "
                             f"sweep directory (with {SWEEP_CSV}), the .json results of "
                             f"dba3c bench scale or a learning curve's .csv table")
    runs = load_runs(run_dirs)
    if only:
        runs = [run for run in runs if chosen(run.name, only)]
        recorded = {name: [row for row in rows if chosen(row["run"], only)]
                    for name, rows in recorded.items()}
        if not runs and not any(recorded.values()):
            raise ValueError(f"--only {','.join(only)}: no run's name matches")
    tables = [("", learning_curve_tables(runs, recorded)),
              ("", {"sync_vs_async": sync_vs_async_table(runs)})]
    for path, rows in sweeps:
        try:
            tables.append((f"{path.name}_" if len(sweeps) > 1 else "", scaling_tables(rows)))
        except ValueError as e:
            raise ValueError(f"{path / SWEEP_CSV}: {e}") from None
    if scales:
        tables.append(("", scale_tables({"points": [point for _, results in scales
                                                    for point in results["points"]]})))
    outputs = {prefix + name: (draw_figure(name, table), table)
               for prefix, named in tables for name, table in named.items() if table}
    if figure8:
        points = [point for _, results in scales for point in results["points"]]
        settings = run_seeds(runs, figure8.score) + recorded_seeds(
            recorded.get("eval_vs_data_points", []), figure8.score)
        if not settings:
            raise ValueError(f"--score {figure8.score:g}: no run directory or "
                             "eval_vs_data_points table to predict Figure 8 from")
        table = figure8_table(settings, figure8.score, figure8.node_rate,
                              efficiency_by_workers(points, figure8.link_gbit, figure8.hidden))
        outputs["figure8_predicted"] = (draw_figure8(table), table)
    return write_outputs(outputs, out_dir)
