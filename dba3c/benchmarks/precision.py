"""``dba3c bench precision``: what bfloat16 buys one node against float32, in one run.

For each precision of ``model.precision`` (float32, then bfloat16, the pair ``pairs`` times
so that a drift of the machine touches both alike): the network's compute ceilings
(:func:`~dba3c.benchmarks.node.compute_ceilings`: prediction states/s, training samples/s),
the matmul peak of that precision, and one process's end-to-end data points/s
(:func:`~dba3c.launchers.trial.run_training`, the simulators included). Each measure's
speed-up is the ratio of the medians (bfloat16 / float32) and, per pair, of the two
neighbouring runs; MFU is each precision's end-to-end FLOP/s over its own matmul peak.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from statistics import median

from dba3c.benchmarks.node import compute_ceilings, matmul_peak
from dba3c.benchmarks.record import command_line, record
from dba3c.cpus import machine_description, this_cpu_precision
from dba3c.launchers.trial import run_training
from dba3c.preset import load_config

PRECISIONS = ("float32", "bfloat16")
# the measures of one precision, in the order they are taken and shown
MEASURES = ("predict_states_per_s", "train_samples_per_s", "matmul_flops_per_s",
            "data_points_per_s")


def speedups(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """For each measure of :data:`MEASURES`: the ratio of the precisions' medians
    (``median``) and the ratio within each pair of runs (``pairs``), bfloat16 / float32."""
    low, high = (runs[p] for p in PRECISIONS)
    return {m: {"median": median(r[m] for r in high) / median(r[m] for r in low),
                "pairs": [b[m] / a[m] for a, b in zip(low, high)]} for m in MEASURES}


def measure_precision(config: str, overrides: list[str], precision: str, seconds: float,
                      train_s: float) -> dict:
    """One precision's measures: ceilings and the matmul peak over ``seconds`` each, one
    process trained for ``train_s``; MFU against that precision's peak."""
    with_precision = [*overrides, f"model.precision={precision}"]
    cfg = load_config(config, with_precision)
    from dba3c.games.envs import env_spaces
    from dba3c.learning.models import make_net_spec

    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    result = compute_ceilings(cfg, spec, seconds)
    result["matmul_flops_per_s"] = matmul_peak(seconds / 2, precision)
    result["data_points_per_s"] = run_training(config, with_precision, 0,
                                               train_s)["data_points_per_s"]
    result["mfu"] = (result["data_points_per_s"] * spec.flops_per_data_point()
                     / result["matmul_flops_per_s"])
    return result


def run_precision_bench(config: str, overrides: list[str], quick: bool,
                        progress: Callable[[str], None] = lambda text: print(
                            text, file=sys.stderr, flush=True)) -> dict:
    """Every measurement, alternating the precisions; the results as one JSON-able dict."""
    seconds, train_s, pairs = (6, 40, 1) if quick else (10, 90, 3)
    runs: dict[str, list[dict]] = {p: [] for p in PRECISIONS}
    for i in range(pairs):
        for precision in PRECISIONS:
            progress(f"bench precision: {precision}, pair {i + 1}/{pairs}: ceilings, matmul "
                     f"peak, {train_s} s of one process")
            runs[precision].append(measure_precision(config, overrides, precision, seconds,
                                                     train_s))
    return {"config": config, "overrides": list(overrides), "quick": quick,
            "date": date.today().isoformat(), "machine": machine_description(),
            "native_bfloat16": this_cpu_precision("auto").native_bfloat16,
            "runs": runs, "speedups": speedups(runs)}


def precision_table(r: dict, command: str) -> str:
    """The results as a dated Markdown page: each measure's medians and speed-ups."""
    names = {"predict_states_per_s": "prediction ceiling, states/s",
             "train_samples_per_s": "training ceiling, samples/s",
             "matmul_flops_per_s": "matmul peak, GFLOP/s",
             "data_points_per_s": "end to end, one process, data points/s"}
    scale = {"matmul_flops_per_s": 1e-9}
    lines = [f"# `dba3c bench precision{' --quick' if r['quick'] else ''}` on {r['date']}",
             "", f"Command: `{command}`  ",
             f"Machine: {r['machine']} (native bfloat16: "
             f"{'yes' if r['native_bfloat16'] else 'no'}); config `{r['config']}` "
             f"{' '.join(r['overrides'])}; {len(r['runs']['float32'])} pair(s) of runs", "",
             "| measure | float32 | bfloat16 | bfloat16 / float32 (each pair) |",
             "|---|---|---|---|"]
    for m in MEASURES:
        f32, bf16 = (median(run[m] for run in r["runs"][p]) * scale.get(m, 1)
                     for p in PRECISIONS)
        pairs = ", ".join(f"{x:.2f}" for x in r["speedups"][m]["pairs"])
        lines.append(f"| {names[m]} | {f32:,.0f} | {bf16:,.0f} | "
                     f"**{r['speedups'][m]['median']:.2f}** ({pairs}) |")
    mfu = [median(run["mfu"] for run in r["runs"][p]) for p in PRECISIONS]
    lines += [f"| MFU against the precision's own peak | {mfu[0]:.2f} | {mfu[1]:.2f} | |", ""]
    return "\n".join(lines) + "\n"


def precision_command(config: str, overrides: list[str], quick: bool, out_json: Path,
                      log_dir: Path | None = None) -> tuple[str, Path | None]:
    """Run the bench, write the JSON and, with ``log_dir``, the page as a new log entry;
    return the page and the entry's path."""
    results = run_precision_bench(config, overrides, quick)
    table = precision_table(results, command_line(
        " precision" + (" --quick" if quick else ""), config, overrides))
    return table, record(results, table, out_json, "precision", log_dir)
