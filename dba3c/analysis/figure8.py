"""The paper's Figure 8, time to a score against workers, predicted from measurements.

A synchronous run of W workers with mini-batches of b data points each trains with an
effective batch of W b. Its time to a score S is predicted as

    T(W) = D(W b) / (W r E(W))

``D(W b)`` the data points a run with that effective batch needs to reach S (learning runs:
one process emulating the W workers, ``dist.emulate_workers``, or one worker for W = 1),
``r`` one node's data points/s (``dba3c bench node``) and ``E(W)`` the cluster's scaling
efficiency at W (``dba3c bench scale``; E(1) = 1: one worker waits for nobody). Seeds give
D as a spread, so T as one too. The paper's two points (Breakout to 300: 14.2 hours on one
node, 21 minutes on 64) are drawn beside it, with its game named.

Everything is pure; :mod:`dba3c.analysis.plots` writes the figure and its table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from statistics import mean
from typing import Any, NamedTuple

from matplotlib.figure import Figure

from dba3c.analysis.runs import Run, config_value, seed_groups, spread

# Adamski et al. 2018, section 4 and figure 8: Breakout to a score of 300, one 12-core node
# (batch 512) against 64 of them
PAPER_HOURS = {1: 14.2, 64: 21 / 60}
PAPER_LABEL = "paper: Breakout to 300, 12-core nodes"


def run_workers(config: dict) -> int:
    """The synchronous workers whose statistics a run trains with: ``dist.emulate_workers``
    when set, else ``dist.workers`` (0, the world size, counts as 1)."""
    return int(config_value(config, "dist.emulate_workers") or
               config_value(config, "dist.workers") or 1)


def effective_batch(config: dict) -> int:
    """The data points of one of a run's steps: its workers x its mini-batch."""
    return run_workers(config) * int(config_value(config, "train.batch_size"))


class Seed(NamedTuple):
    """One seed of a setting as the prediction reads it: the setting's workers W and
    effective batch (data points a step), the data points at which the seed first reached
    the score (None: it did not) and those it trained on."""

    workers: int
    effective_batch: int
    reached: int | None
    trained: int


def first_reaching(evaluations: Iterable[tuple[int, float]], score: float) -> int | None:
    """The data points of the first of a seed's evaluations, (data points, mean) in order,
    whose mean is at least ``score``; None when none is."""
    return next((data_points for data_points, mean in evaluations if mean >= score), None)


def data_points_to_score(run: Run, score: float) -> int | None:
    """The data points a run had trained on at its first evaluation whose mean is at least
    ``score`` (:func:`first_reaching`): that evaluation's step x the
    :func:`effective_batch`; None when no evaluation reached it."""
    batch = effective_batch(run.config)
    return first_reaching(((e["step"] * batch, e["mean"]) for e in run.evals), score)


def data_points_trained(run: Run) -> int:
    """The data points of a run's last logged step (0 before its first)."""
    return run.metrics[-1]["step"] * effective_batch(run.config) if run.metrics else 0


def run_seeds(runs: list[Run], score: float) -> list[list[Seed]]:
    """Run directories as :class:`Seed` s, the seeds of one experiment
    (:func:`dba3c.analysis.runs.seed_groups`) together."""
    return [[Seed(run_workers(run.config), effective_batch(run.config),
                  data_points_to_score(run, score), data_points_trained(run))
             for run in group] for group in seed_groups(runs)]


def efficiency_by_workers(points: Sequence[Mapping[str, Any]], link_gbit: float,
                          hidden: int) -> dict[int, float]:
    """E(W) from ``dba3c bench scale`` points: for each W, the best aggregation measured
    over ``link_gbit`` with FC ``hidden`` (the mean of a point measured several times), no
    stragglers or backup workers; E(1) = 1."""
    measured: dict[tuple[int, Any], list[float]] = {}
    for p in points:
        if "error" in p or p["replicas"] or p["slow_workers"] or \
                p["link_gbit"] != link_gbit or p["hidden"] != hidden:
            continue
        mode = (p.get("aggregation"), p.get("overlap"), p["ps"])
        measured.setdefault((p["workers"], mode), []).append(p["efficiency"])
    best: dict[int, float] = {1: 1.0}
    for (workers, _), values in measured.items():
        best[workers] = max(best.get(workers, 0.0), mean(values))
    return best


def predicted_rows(settings: list[list[Seed]], score: float, node_rate: float,
                   efficiency: Mapping[int, float]) -> list[dict]:
    """One row per setting (its seeds; its W and effective batch: its first seed's): the
    seeds that reached ``score``, the spread of their data points to it, E(W), and the
    predicted hours (:func:`predicted_hours`: mean and the seeds' low and high), in order
    of W. A setting none of whose seeds reached the score, or whose W has no measured E,
    gives the data points it trained on (``not_reached_within``) and no prediction; with a
    measured E, the time those data points take is its lower bound (``hours_at_least``)."""
    rows = []
    for seeds in settings:
        workers = seeds[0].workers
        reached = spread([seed.reached for seed in seeds])
        row: dict[str, Any] = {
            "series": "predicted", "workers": workers,
            "effective_batch": seeds[0].effective_batch,
            "seeds": len(seeds), "seeds_reached": reached.n if reached else 0,
            "score": score, "node_data_points_per_s": node_rate,
            "efficiency": efficiency.get(workers)}
        if reached and row["efficiency"]:
            row |= {"data_points_mean": reached.mean, "data_points_low": reached.low,
                    "data_points_high": reached.high}
            row |= {f"hours_{k}": predicted_hours(reached[i], workers, node_rate,
                                                  row["efficiency"])
                    for i, k in enumerate(("mean", "low", "high"))}
        else:
            row["not_reached_within"] = min(seed.trained for seed in seeds)
            if row["efficiency"]:
                row["hours_at_least"] = predicted_hours(row["not_reached_within"], workers,
                                                        node_rate, row["efficiency"])
        rows.append(row)
    return sorted(rows, key=lambda row: row["workers"])


def predicted_hours(data_points: float, workers: int, node_rate: float,
                    efficiency: float) -> float:
    """T(W) = D / (W r E), in hours."""
    return data_points / (workers * node_rate * efficiency) / 3600


def figure8_table(settings: list[list[Seed]], score: float, node_rate: float,
                  efficiency: Mapping[int, float]) -> list[dict]:
    """:func:`predicted_rows`, the linear speed-up from the smallest predicted W (T_W0 W0 /
    W at that W and every larger one, predicted or not: where a lower bound lies against
    it) and the paper's points (series ``paper``)."""
    rows = predicted_rows(settings, score, node_rate, efficiency)
    known = [row for row in rows if "hours_mean" in row]
    if known:
        first = known[0]
        for row in rows:
            if row["workers"] >= first["workers"]:
                row["linear_hours"] = first["hours_mean"] * first["workers"] / row["workers"]
    return rows + [{"series": PAPER_LABEL, "workers": w, "hours_mean": h}
                   for w, h in PAPER_HOURS.items()]


def draw_figure8(table: list[dict]) -> Figure:
    """Log-log hours against workers: the prediction with the seeds' low-high as error
    bars, its linear speed-up dotted, the lower bounds of the Ws not reached as carets,
    the paper's points; beside each of ours, how many of its seeds reached the score."""
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.add_subplot()
    ours = [row for row in table if row["series"] == "predicted" and "hours_mean" in row]
    if ours:
        xs, ys = [r["workers"] for r in ours], [r["hours_mean"] for r in ours]
        axes.errorbar(xs, ys, yerr=[[y - r["hours_low"] for y, r in zip(ys, ours)],
                                    [r["hours_high"] - y for y, r in zip(ys, ours)]],
                      fmt="o-", capsize=3, label=f"predicted: score {ours[0]['score']:g}")
    linear = [row for row in table if "linear_hours" in row]
    if linear:
        axes.plot([r["workers"] for r in linear], [r["linear_hours"] for r in linear], ":",
                  color="C0", label="linear speed-up")
    bounds = [row for row in table if "hours_at_least" in row]
    if bounds:
        axes.plot([r["workers"] for r in bounds], [r["hours_at_least"] for r in bounds], "^",
                  color="C1", label="not reached: at least its budget's time")
    for row in ours + bounds:
        axes.annotate(f"{row['seeds_reached']}/{row['seeds']} seeds",
                      (row["workers"], row.get("hours_mean", row.get("hours_at_least"))),
                      textcoords="offset points", xytext=(6, 4), fontsize="x-small")
    paper = [row for row in table if row["series"] == PAPER_LABEL]
    axes.plot([r["workers"] for r in paper], [r["hours_mean"] for r in paper], "s--",
              color="C3", label=PAPER_LABEL)
    axes.set(xscale="log", yscale="log", xlabel="workers W",
             ylabel="time to score [hours]", title="Time to score vs workers (predicted)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    return figure
