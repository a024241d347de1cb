"""``dba3c bench scale``'s command and report: run the grid
(:func:`~dba3c.benchmarks.scale.cluster.run_scale`), keep the points so far while it runs,
write ``bench/scale.json`` and, with ``--log``, the Markdown table as a new log entry
(:func:`dba3c.benchmarks.record.record`)."""

from __future__ import annotations

from pathlib import Path

from dba3c.benchmarks.overlap_cost import charged_overlap_cost, staging_source
from dba3c.benchmarks.record import command_line, record, write_results
from dba3c.benchmarks.scale.cluster import POINT_TIMEOUT_S, run_scale
from dba3c.benchmarks.scale.grid import EVERY_POINT, Selection
from dba3c.errors import Interrupted
from dba3c.preset import load_config


def scale_table(r: dict, command: str) -> str:
    """The results as a dated Markdown page (a level-1 heading, the command, the machine, how
    the figures were made, the table: emulated results, labelled so, each point's settings
    with its type on the wire, the model's step times beside each measured one
    and their difference from it); ``command``: the command line that reproduces them."""
    rows = []
    for p in r["points"]:
        backup = f"{p['replicas']}/{p['workers']}" if p["replicas"] else "all"
        slow = (f"{p['slow_workers']} x{p['slow_factor']:g}" if p["slow_workers"] else "none")
        servers = (("coll. overlapped" if p.get("overlap") else "coll.")
                   if p.get("aggregation") == "collective" else p["ps"])
        head = (f"| {p['link_gbit']} | {p['time_scale']:g} | {p['workers']} | {servers} | "
                f"{p['hidden']} | {p.get('wire_dtype', 'float32')} | {backup} | {slow} |")
        if "error" in p:
            rows.append(f"{head} failed | | | | | | | |")
            continue
        cpu = "?" if p["cpu_busy"] is None else f"{100 * p['cpu_busy']:.0f}%"
        rss = max(p["peak_rss_mb"].values(), default=0.0)
        models = " | ".join(f"{p[key]:.1f} ({p[key] / p['step_ms'] - 1:+.0%})"
                            for key in ("model_step_ms", "emulated_model_step_ms"))
        rows.append(f"{head} {p['step_ms']:.1f} | {models} | {p['efficiency']:.2f} | "
                    f"{p['data_points_per_s']:.0f} | {cpu} | {rss:.0f} |")
    return "\n".join([
        (f"# `dba3c bench scale{' --quick' if r['quick'] else ''}"
         f"{' --aggregation collective' if r.get('aggregation') == 'collective' else ''}` "
         f"on {r['date']} "
         f"(emulated cluster)"), "",
        f"Command: `{command}`  ", (f"Machine: {r['machine']}; config `{r['config']}` "
                                    f"{' '.join(r['overrides'])}"), "",
        (f"EMULATED: synthetic-compute ranks, T_c = {r['compute_ms']:.1f} ms "
         f"({r['compute_ms_source']}); {r['links']}. Time scale s per row: links at rate / s, "
         f"each worker waits T_c x s per step; step time = steady step time / s (steps after "
         f"the warm-up); E = T_c / T_step; model: docs/benchmarks.md's analytic step time "
         f"of a real cluster, and the same with the emulating host's cores as a second "
         f"limit on the transfers (every vector through this host's TCP stack at "
         f"{r['host_bytes_per_s'] / 1e6:.0f} MB/s, the unshaped MPI ping-pong rate, / s); "
         f"their difference from the measurement in brackets. CPU: the whole machine's use "
         f"in the steady window."
         + (f" Collectives: dist.collective_algorithm={r['collective_algorithm']}."
            if r["aggregation"] == "collective" else "")
         + (f" Overlapped steps charged staging {r['overlap_cost']['value']:g} x T_c "
            f"({staging_source(r['overlap_cost'])})." if "overlap_cost" in r else "")), "",
        ("| link, Gb/s | s | W | P | FC | on the wire | gradients per step | "
         "stragglers | step, ms | model, ms | model, host-limited, ms | E | data points/s | "
         "CPU | peak RSS of a rank, MB |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rows, ""]) + "\n"



def scale_command(config: str, overrides: list[str], quick: bool, compute_ms: float | None,
                  time_scale: float, out_json: Path, log_dir: Path | None = None,
                  aggregation: str = "ps", chosen: Selection = EVERY_POINT,
                  point_timeout: float = POINT_TIMEOUT_S,
                  wire_dtype: str | None = None) -> tuple[str, Path | None]:
    """Run the grid (gradients in ``wire_dtype``, ``--wire-dtype``; None: the config's),
    write ``out_json`` and, with ``log_dir``, the Markdown page as a new log
    entry there; return the page and the entry's path (None without ``log_dir``). While it
    runs, the points so far are in ``NAME.partial.json`` beside ``out_json``; an interrupt
    (SIGINT, SIGTERM) leaves them there and raises :class:`~dba3c.errors.Interrupted` saying
    how many and where."""
    partial_json = out_json.with_suffix(".partial.json")
    kept: list[dict] = []
    # staging charged as this machine measured it (dba3c bench overlap-cost), if it did
    charged, staging = charged_overlap_cost(overrides,
                                            load_config(config, overrides).dist.overlap_cost)

    def partial(results: dict) -> None:  # a grid cut short keeps the points it measured
        results["overlap_cost"] = staging
        write_results(results, partial_json)
        kept[:] = results["points"]

    try:
        results = run_scale(config, charged, quick, compute_ms, time_scale, aggregation,
                            chosen, point_timeout, partial=partial, wire_dtype=wire_dtype)
        results["overlap_cost"] = staging
    except Interrupted as e:
        where = partial_json if kept else "nowhere (none was measured)"
        raise Interrupted(e.signum, f"{len(kept)} points measured kept in {where}") from None
    partial_json.unlink(missing_ok=True)
    options = (" scale" + (" --quick" if quick else "")
               + (f" --compute-ms {compute_ms:g}" if compute_ms else "")
               + f" --time-scale {time_scale:g}"
               + (" --aggregation collective" if aggregation == "collective" else "")
               + chosen.options()
               + (f" --wire-dtype {wire_dtype}" if wire_dtype else "")
               + (f" --point-timeout {point_timeout:g}"
                  if point_timeout != POINT_TIMEOUT_S else ""))
    table = scale_table(results, command_line(options, config, overrides))
    return table, record(results, table, out_json, "scale", log_dir)
