"""What the overlapped (staged) collective step costs a real rank on this machine, and where
``dba3c bench scale`` reads it.

    dba3c bench overlap-cost                       # writes bench/overlap_cost.json
    dba3c bench overlap-cost --steps 400 --probe-steps 10

One ``dba3c train`` job (:func:`dba3c.benchmarks.real_ranks.run_job`): one real rank of the
paper network (``--config``, the preset's simulators and mini-batch) in the collective mode,
on all of this machine's cores, so there is nothing to hide: the bytes go nowhere and
the difference between the modes is what staging costs. (MPI runs the collective mode in a
world of two or more: the job's second rank is an evaluator that only waits, ``eval.every``
0.) The run alternates from its first
step: ``--probe-steps`` serial steps, as many overlapped ones, again (``dist.
overlap_probe_steps``, ``dist.overlap_probe_every`` at twice that: probes back to back, as
:func:`~dba3c.distributed.collective.staged.probe_mode` numbers them; ``dist.gather_ahead``
never, so no third mode), so drift of the machine
falls on both modes alike. Each mode's seconds per step in each probe are read from the
chief's metrics as the rank times them (:func:`phase_seconds`: the phase's first step, which
may trace a graph, left out); the first probe (warm-up) is left out too. The cost is the
median over the probes of overlapped / serial - 1 (:func:`staged_cost`).

The record (``bench/overlap_cost.json``) holds the cost, the machine that measured it, the
date and the command; ``dba3c bench scale`` charges it to its synthetic ranks and its model
as ``dist.overlap_cost`` (:func:`charged_overlap_cost`). Without a record the config's value
stands: its default (0.14) was measured on another machine (:data:`DEFAULT_SOURCE`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from datetime import date
from pathlib import Path

from dba3c.errors import UserError

OVERLAP_COST_JSON = Path("bench/overlap_cost.json")
DEFAULT_SOURCE = ("dist.overlap_cost's default (no bench/overlap_cost.json): measured on 4 "
                  "real ranks of 4 cores of a 16-core Intel Xeon (family 6 model 207), "
                  "2026-11-27")


def phase_seconds(metrics: list[dict], probe: int) -> list[tuple[float, float]]:
    """(serial, overlapped) seconds per step of each whole probe of a run whose probes come
    back to back (``probe`` steps of each mode, the run's first step is step 1): a phase's
    time from its first step's record to its last's, over ``probe - 1`` steps (what the rank
    times: :meth:`~dba3c.distributed.collective.staged.StagedTraining.timed`)."""
    time_at = {m["step"]: m["time_s"] for m in metrics}

    def phase(first: int) -> float | None:
        last = first + probe - 1
        if first not in time_at or last not in time_at:
            return None
        return (time_at[last] - time_at[first]) / (probe - 1)

    probes = []
    for start in range(1, max(time_at, default=0) + 1, 2 * probe):
        serial, overlapped = phase(start), phase(start + probe)
        if serial is not None and overlapped is not None:
            probes.append((serial, overlapped))
    return probes


def staged_cost(probes: list[tuple[float, float]]) -> float:
    """The median over ``probes`` of overlapped / serial - 1: what staging adds to a step."""
    return statistics.median(overlapped / serial - 1 for serial, overlapped in probes)


def read_overlap_cost(path: Path = OVERLAP_COST_JSON) -> dict | None:
    """The record :func:`measure` wrote at ``path``; None where there is none."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def charged_overlap_cost(overrides: list[str], config_cost: float,
                         path: Path = OVERLAP_COST_JSON) -> tuple[list[str], dict]:
    """The overrides a scale bench runs with, and what it records of the staging it charges:
    ``dist.overlap_cost`` as given in ``overrides``, else the cost measured on this machine
    (``path``, not below 0), else the config's, ``config_cost`` (:data:`DEFAULT_SOURCE`)."""
    if any(o.startswith("dist.overlap_cost=") for o in overrides):
        return overrides, {"value": config_cost,
                           "source": "dist.overlap_cost on the command line"}
    measured = read_overlap_cost(path)
    if measured is None:
        return overrides, {"value": config_cost, "source": DEFAULT_SOURCE}
    cost = max(0.0, measured["overlap_cost"])
    return [*overrides, f"dist.overlap_cost={cost:.4f}"], {
        "value": cost, "source": str(path), "measured": measured["overlap_cost"],
        "machine": measured["machine"], "date": measured["date"],
        "command": measured["command"]}


def staging_source(staging: dict) -> str:
    """Where the staging cost a scale bench charged came from, in words
    (:func:`charged_overlap_cost`'s record)."""
    if "machine" not in staging:
        return staging["source"]
    return (f"measured by dba3c bench overlap-cost on {staging['machine']}, "
            f"{staging['date']}")


def measure(config: str, steps: int, probe: int, work_dir: Path, out: Path) -> int:
    """``dba3c bench overlap-cost``: the run (see the module docstring), its figures printed
    and written to ``out``."""
    from dba3c.benchmarks.real_ranks import FIRST_LINE, overlap_choices, overrides, run_job
    from dba3c.benchmarks.record import write_results
    from dba3c.cpus import machine_description

    if probe < 2:
        raise UserError(f"--probe-steps {probe}: at least 2 (a phase's first step is not "
                        f"timed)")
    if steps < 4 * probe:
        raise UserError(f"--steps {steps}: at least 4 x --probe-steps ({4 * probe}: the "
                        f"first probe warms up, a second measures)")
    cores = os.cpu_count() or 1
    run_overrides = [*overrides(1, steps, "auto", work_dir),
                     f"dist.overlap_probe_steps={probe}",
                     f"dist.overlap_probe_every={2 * probe}", "dist.gather_ahead=never"]
    stderr, metrics, cpu, wall = run_job(config, run_overrides, 1, cores, work_dir,
                                         evaluator=True)
    probes = phase_seconds(metrics, probe)[1:]  # the first warms up
    if not probes:
        raise RuntimeError(f"no whole probe after the first in {len(metrics)} metrics "
                           f"records")
    cost = staged_cost(probes)
    command = (f"dba3c bench overlap-cost --config {config} --steps {steps} "
               f"--probe-steps {probe}")
    results = {"overlap_cost": cost, "machine": machine_description(),
               "date": date.today().isoformat(), "command": command, "config": config,
               "cores": cores, "probe_steps": probe, "steps": len(metrics),
               "serial_s": [s for s, _ in probes], "overlapped_s": [o for _, o in probes],
               "cpu_s_per_step": cpu / steps, "wall_s": wall,
               "first_lines": FIRST_LINE.findall(stderr),
               "overlap_choices": overlap_choices(stderr)}
    write_results(results, out)
    for serial, overlapped in probes:
        print(f"overlap_cost: serial {1000 * serial:.1f} ms a step, overlapped "
              f"{1000 * overlapped:.1f} ms (x{overlapped / serial:.3f})", file=sys.stderr)
    print(f"overlap_cost: staging costs one rank of {cores} cores {100 * cost:+.1f}% a step "
          f"(the median of {len(probes)} probes): {out}", file=sys.stderr)
    return 0
