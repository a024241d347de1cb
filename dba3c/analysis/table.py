"""``dba3c table``: runs of the paper's games beside its Table 3
(:mod:`dba3c.analysis.paper`), one row per game and config, across seeds.

Each run (:func:`seed_result`) is measured from its evaluations (``eval.jsonl``: the mean
score of ``eval.episodes`` greedy games, and the wall time ``t`` when they ended) and its
metrics, against the paper's score S and wall time T for its game:

* best: the highest evaluation mean, ``max_k mean_k``;
* hns: that best mean human-normalized, ``(best - random) / (human - random)``
  (:func:`dba3c.games.scores.human_normalized_score`);
* at the paper's time: the mean of the last evaluation with ``t_k <= T``; a run that
  ended before T has none there, unless it ended at its target (its final policy keeps its
  score: :func:`dba3c.analysis.runs.ended_at_target`);
* time to the paper's score: ``min {t_k : mean_k >= S}``; none: not reached;
* data points and frames: what its workers trained on and emulated,
  ``sum_i rate_i (t_i - t_{i-1})`` over the metrics lines (:func:`dba3c.analysis.runs.cumulative`);
* hours: its wall time, the last time it recorded.

A group (:func:`group_row`) is the runs of one game and config that differ only by seed
(:func:`dba3c.analysis.runs.seed_groups`); each measure is given over its seeds as the
mean, min and max (:func:`dba3c.analysis.runs.spread`), the time to the paper's score over
the seeds that reached it, with their count. All runs of one table share one evaluation
protocol (:func:`check_runs`).

Pure but :func:`table_command`, which reads the run directories and writes ``table.md``,
``table.csv``, ``seeds.csv`` (one row per run) and ``table.png``.
"""

from __future__ import annotations

from math import ceil
from pathlib import Path
from typing import Any, NamedTuple

from matplotlib.figure import Figure

from dba3c.analysis.paper import PAPER, SYSTEMS, paper_result, table3
from dba3c.analysis.plots import Table, write_csv, write_outputs
from dba3c.analysis.runs import (
    Run,
    Spread,
    config_value,
    cumulative,
    ended_at_target,
    group_label,
    learning_config,
    load_runs,
    seed_groups,
    spread,
)
from dba3c.games.scores import human_normalized_score

HOUR = 3600.0
PAPER_GAMES = 50  # the paper's evaluation: 50 consecutive greedy games
LABEL_KEYS = 3  # differing config keys named in a row's config label, at most


class Protocol(NamedTuple):
    """How a run is evaluated: the config keys ``eval.protocol``, ``eval.episodes`` (games),
    ``eval.greedy``, ``eval.noop_max`` and ``eval.max_frames``. Runs of one table share
    them."""

    name: str
    games: int
    greedy: bool
    noop_max: int
    max_frames: int

    def __str__(self) -> str:
        return (f"{self.name} protocol, {self.games} {'greedy' if self.greedy else 'sampled'}"
                f" games, {self.noop_max} no-op starts, at most {self.max_frames} frames each")


class SeedResult(NamedTuple):
    """One run measured against the paper (the module's docstring defines each measure);
    times in hours, None where there is no value."""

    run: str
    seed: Any
    best: float | None
    hns: float | None
    at_paper_time: float | None
    hours_to_paper_score: float | None
    data_points: float
    frames: float
    hours: float


# the SeedResult fields given over seeds, in the table's order
MEASURES = ("best", "hns", "at_paper_time", "hours_to_paper_score", "data_points", "frames",
            "hours")


def game_of(run: Run) -> str:
    """The run's game (``env.id``)."""
    return str(config_value(run.config, "env.id"))


def protocol_of(run: Run) -> Protocol:
    """The run's evaluation protocol, from its config."""
    return Protocol(*(config_value(run.config, f"eval.{key}") for key in
                      ("protocol", "episodes", "greedy", "noop_max", "max_frames")))


def check_runs(runs: list[Run]) -> Protocol:
    """The evaluation protocol all ``runs`` share. Raises ValueError naming the first run
    without a config, whose game the paper does not report, or whose protocol differs from
    the first run's."""
    for run in runs:
        if not run.config:
            raise ValueError(f"{run.path}: no config.yaml: its game and evaluation protocol "
                             f"are unknown")
        try:
            paper_result(game_of(run))
        except ValueError as e:
            raise ValueError(f"{run.path}: env.id={e}") from None
        if protocol_of(run) != protocol_of(runs[0]):
            raise ValueError(f"runs of different evaluation protocols cannot share a table: "
                             f"{runs[0].path} ({protocol_of(runs[0])}) and {run.path} "
                             f"({protocol_of(run)})")
    return protocol_of(runs[0])


def seed_result(run: Run) -> SeedResult:
    """One run against the paper's score and wall time for its game (module docstring)."""
    paper = paper_result(game_of(run))
    best = max((e["mean"] for e in run.evals), default=None)
    end = max((r["time_s"] for r in (*run.metrics, *run.evals)), default=0.0)
    by_then = [e["mean"] for e in run.evals if e["time_s"] <= paper.hours * HOUR]
    lasted = end >= paper.hours * HOUR or ended_at_target(run)
    reached = [e["time_s"] for e in run.evals if e["mean"] >= paper.score]
    return SeedResult(
        run=str(run.path), seed=config_value(run.config, "run.seed"), best=best,
        hns=None if best is None else human_normalized_score(game_of(run), best),
        at_paper_time=by_then[-1] if by_then and lasted else None,
        hours_to_paper_score=reached[0] / HOUR if reached else None,
        data_points=(cumulative(run.metrics, "perf/data_points_per_s") or [0.0])[-1],
        frames=(cumulative(run.metrics, "perf/env_frames_per_s") or [0.0])[-1],
        hours=end / HOUR)


def _stats(name: str, stats: Spread | None) -> dict[str, float | None]:
    """``name_mean``, ``name_min``, ``name_max`` and ``name_seeds`` (how many seeds have a
    value) of a spread; None and 0 without one."""
    return {f"{name}_mean": stats.mean if stats else None,
            f"{name}_min": stats.low if stats else None,
            f"{name}_max": stats.high if stats else None,
            f"{name}_seeds": stats.n if stats else 0}


def _slug(system: str) -> str:
    """A system's name as a column prefix: ``DDRL A3C`` -> ``ddrl_a3c``."""
    return system.lower().replace(" ", "_")


def group_row(results: list[SeedResult], game: str, config: str) -> dict[str, Any]:
    """The table's row for the seeds of one game and config (``results``: their
    :func:`seed_result`): ``game``, ``config``, ``seeds`` and their ``seed_values``, the
    paper's score and hours, each measure's ``_mean``, ``_min``, ``_max`` and ``_seeds``
    over the seeds that have it (:func:`_stats`), each system's ``<system>_score`` and
    ``<system>_hours`` (None: not reported), and the run directories."""
    paper = paper_result(game)
    row: dict[str, Any] = {
        "game": game, "config": config, "seeds": len(results),
        "seed_values": " ".join(str(result.seed) for result in results),
        "paper_score": paper.score, "paper_hours": paper.hours}
    for measure in MEASURES:
        row |= _stats(measure, spread([getattr(result, measure) for result in results]))
    for system, result in table3()[game].items():
        row[f"{_slug(system)}_score"] = result.score if result else None
        row[f"{_slug(system)}_hours"] = result.hours if result else None
    row["runs"] = " ".join(result.run for result in results)
    return row


def config_labels(groups: list[list[Run]]) -> list[str]:
    """Each group's name (:func:`dba3c.analysis.runs.group_label`), then the config keys
    (:data:`LABEL_KEYS` at most) in which it differs from the other groups of its game,
    e.g. ``pong_64: adam.epsilon=0.001``."""
    labels = []
    for group in groups:
        mine = learning_config(group[0].config)
        others = [learning_config(g[0].config) for g in groups
                  if g is not group and game_of(g[0]) == game_of(group[0])]
        keys = [key for key in mine if any(other.get(key) != mine[key] for other in others)]
        named = ", ".join(f"{key}={mine[key]}" for key in keys[:LABEL_KEYS])
        more = f" (+{len(keys) - LABEL_KEYS} more)" if len(keys) > LABEL_KEYS else ""
        labels.append(f"{group_label(group)}: {named}{more}" if keys else group_label(group))
    return labels


def table_rows(runs: list[Run]) -> tuple[Table, Table]:
    """The table (:func:`group_row` per game and config, games in the paper's order) and
    the per-run table (:func:`seed_result` with its game and config), for runs that pass
    :func:`check_runs`."""
    groups = seed_groups(runs)
    order = list(table3())
    rows, seeds = [], []
    for group, label in sorted(zip(groups, config_labels(groups)),
                               key=lambda pair: order.index(game_of(pair[0][0]))):
        game, results = game_of(group[0]), [seed_result(run) for run in group]
        rows.append(group_row(results, game, label))
        seeds += [{"game": game, "config": label, **result._asdict()} for result in results]
    return rows, seeds


# ---- Markdown and figure ------------------------------------------------------------------


def _number(value: float, unit: str) -> str:
    """A value in its unit, without it: millions (``M``) and scores (no unit) to 0.1,
    ``hns`` and hours (``h``) to 0.01."""
    if unit == "M":
        return f"{value / 1e6:.1f}"
    return f"{value:.2f}" if unit in ("hns", "h") else f"{value:.1f}"


def _cell(row: dict, measure: str, unit: str, none: str) -> str:
    """A measure over seeds: ``mean unit [min to max]`` (``mean unit`` for one seed), then
    ``(k of n seeds)`` when only k of the n have a value; ``none`` when none has."""
    mean, low, high, seeds = (row[f"{measure}_{part}"]
                              for part in ("mean", "min", "max", "seeds"))
    if not seeds:
        return none
    text = _number(mean, unit) + (f" {unit}" if unit in ("h", "M") else "")
    if seeds > 1:
        text += f" [{_number(low, unit)} to {_number(high, unit)}]"
    return text if seeds == row["seeds"] else f"{text} ({seeds} of {row['seeds']} seeds)"


def _paper_cell(row: dict, system: str) -> str:
    """``score (hours h)`` of a system; ``-`` where the paper reports none."""
    score, hours = row[f"{_slug(system)}_score"], row[f"{_slug(system)}_hours"]
    return "-" if score is None else f"{score:g} ({hours:g} h)"


# our columns: header, measure, unit, the text when no seed has a value
_OURS = (("best greedy mean", "best", "", "-"), ("HNS", "hns", "hns", "-"),
         ("score at the paper's wall time", "at_paper_time", "", "-"),
         ("time to the paper's score", "hours_to_paper_score", "h", "not reached"),
         ("data points", "data_points", "M", "-"), ("frames", "frames", "M", "-"),
         ("wall time", "hours", "h", "-"))


def markdown(rows: Table, protocol: Protocol) -> str:
    """The table in Markdown: game, config and seeds, our measures (:data:`_OURS`), the
    paper's columns; then notes on the evaluation protocol, on what a cell over seeds is
    and, where the runs' protocol is not the paper's 50 greedy games, that difference."""
    header = ["game", "config", "seeds", *(column[0] for column in _OURS),
              *(f"{s} (paper, 64 nodes)" if s == PAPER else s for s in SYSTEMS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["game"], row["config"], str(row["seeds"]),
                 *(_cell(row, measure, unit, none) for _, measure, unit, none in _OURS),
                 *(_paper_cell(row, s) for s in SYSTEMS)]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"Evaluation: {protocol}; a score is the mean of one evaluation's games.",
             "Over seeds: mean [min to max], of the seeds that have a value. The score at "
             "the paper's wall time is the last evaluation's by then, for seeds that ran "
             "that long or stopped at their target; the time to the paper's score is the "
             "first evaluation's at or above it. The paper's columns: score (wall time)."]
    if (protocol.games, protocol.greedy) != (PAPER_GAMES, True):
        notes.append(f"The paper's scores are means of {PAPER_GAMES} greedy games; these "
                     f"runs' are not.")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {note}" for note in notes) + "\n"


def table_figure(rows: Table) -> Figure:
    """One panel per row: our best greedy mean (bar: the mean over seeds, whisker: min to
    max) beside each system's score in the paper, a bar labelled with its wall time in
    hours (ours: to the paper's score where a seed reached it, else the runs' length)."""
    columns = min(3, len(rows))
    figure = Figure(figsize=(4.5 * columns, 3.5 * ceil(len(rows) / columns)),
                    layout="constrained")
    for index, row in enumerate(rows):
        axes = figure.add_subplot(ceil(len(rows) / columns), columns, index + 1)
        ours_hours = row["hours_to_paper_score_mean"] or row["hours_mean"]
        bars = [("ours", row["best_mean"], ours_hours),
                *((s, row[f"{_slug(s)}_score"], row[f"{_slug(s)}_hours"]) for s in SYSTEMS)]
        shown = [(name, score, hours) for name, score, hours in bars if score is not None]
        drawn = axes.bar([name for name, _, _ in shown], [score for _, score, _ in shown],
                         color=["C0"] + ["C7"] * (len(shown) - 1))
        if row["best_seeds"] > 1:
            axes.errorbar([0], [row["best_mean"]], color="black", capsize=4, yerr=[
                [row["best_mean"] - row["best_min"]], [row["best_max"] - row["best_mean"]]])
        axes.bar_label(drawn, labels=[f"{hours:.2g} h" for _, _, hours in shown],
                       fontsize="small")
        seeds = f"{row['seeds']} seed{'s' if row['seeds'] > 1 else ''}"
        axes.set_title(f"{row['game']}, {seeds}\n{row['config']}", fontsize="small")
        axes.set_ylabel("mean greedy score [points/game]", fontsize="small")
        axes.tick_params(labelsize="small")
    return figure


def table_command(paths: list, out_dir: str | Path) -> tuple[str, list[Path]]:
    """``dba3c table RUN_DIR... --out DIR``: the Markdown table and the files written:
    ``table.md``, ``table.png`` and ``table.csv`` (one row per game and config),
    ``seeds.csv`` (one row per run). Raises ValueError naming a path that is not a run
    directory, or the problem :func:`check_runs` finds."""
    runs = load_runs(paths)
    protocol = check_runs(runs)
    rows, seeds = table_rows(runs)
    text = markdown(rows, protocol)
    out = Path(out_dir)
    written = write_outputs({"table": (table_figure(rows), rows)}, out)
    (out / "table.md").write_text(text, encoding="utf-8")
    write_csv(out / "seeds.csv", seeds)
    return text, [out / "table.md", *written, out / "seeds.csv"]
