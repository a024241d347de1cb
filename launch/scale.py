"""``dba3c bench --scale``: the distributed layer at scale, with synthetic-compute ranks.

Every grid point is one ``dba3c launch`` of synthetic workers (no TensorFlow, see
``dba3c/synthetic.py``) on this host: W workers, P parameter servers, the paper network at FC
H, optionally backup workers (R of W gradients per step) and stragglers. Time is scaled by s:
each worker computes for T_c x s per step, so the many ranks of a 64-worker point leave the
machine unsaturated; the steady-state step time divided by s estimates the real one, and the
scaling efficiency is E = T_c / T_step. The machine's CPU use in the steady window is reported
so a saturated point can be told apart.

On one host the ranks talk through shared memory, which is not slowed down by s: these
numbers measure the protocol and the parameter servers, not a network. Run on the emulated
cluster (links at rate / s) the same harness measures the network too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

from dba3c.config import load_config
from dba3c.rundir import RunDir

# T_c assumed for one 12-core node of the paper: docs/benchmarks.md measured 77 ms per step on
# 2 cores and scales it by 2/12 at equal efficiency (~13 ms); an assumption, not a measurement
DEFAULT_COMPUTE_MS = 77.0 * 2 / 12
COMPUTE_MS_SOURCE = ("assumed: 77 ms per step measured on 2 cores (docs/benchmarks.md) "
                     "x 2/12 for a 12-core node")


@dataclass(frozen=True)
class ScalePoint:
    """One run of the grid: W workers, P parameter servers, FC ``hidden``; ``replicas``
    gradients per step (0 = all); the last ``slow_workers`` take ``slow_factor`` x T_c."""

    workers: int
    ps: int
    hidden: int = 128
    replicas: int = 0
    slow_workers: int = 0
    slow_factor: float = 2.0

    def overrides(self) -> list[str]:
        """The config overrides of this point."""
        return [f"model.hidden={self.hidden}", f"dist.replicas_to_aggregate={self.replicas}",
                f"synthetic.slow_workers={self.slow_workers}",
                f"synthetic.slow_factor={self.slow_factor}"]


def scale_grid(quick: bool) -> list[ScalePoint]:
    """The points measured: W x P at FC 128, FC sizes and P at the largest W, and backup
    workers (R = W - W/16) with and without stragglers. ``quick`` is a 16-worker version."""
    sizes: tuple[int, ...]
    servers: tuple[int, ...]
    fcs: tuple[int, ...]
    if quick:
        sizes, servers, top, fcs = (1, 4, 16), (1, 4), 16, (32, 512)
    else:
        sizes, servers, top, fcs = (1, 2, 4, 8, 16, 32, 64), (1, 2, 4, 8), 64, (32, 256, 512)
    points = [ScalePoint(w, p) for w in sizes for p in servers]
    points += [ScalePoint(top, 4, hidden=h) for h in fcs]
    if not quick:
        points += [ScalePoint(top, p) for p in (3, 5, 6, 7)]
    backups = top - top // 16
    points += [ScalePoint(top, 4, replicas=backups),
               ScalePoint(top, 4, replicas=backups, slow_workers=top // 16),
               ScalePoint(top, 4, slow_workers=top // 16)]
    return list(dict.fromkeys(points))


def steady_step_seconds(metrics: list[dict], warmup: int) -> float:
    """Seconds per global step after the first ``warmup`` steps: the slope of the chief's
    ``time_s`` over ``step`` between the first and last record past the warm-up."""
    tail = [m for m in metrics if m["step"] > warmup]
    if len(tail) < 2:
        raise ValueError(f"{len(tail)} metrics records after a warm-up of {warmup} steps: "
                         f"need at least 2")
    return (tail[-1]["time_s"] - tail[0]["time_s"]) / (tail[-1]["step"] - tail[0]["step"])


def cpu_times(stat_line: str) -> tuple[int, int]:
    """(busy, total) jiffies from the ``cpu`` line of /proc/stat (idle and iowait are not
    busy)."""
    values = [int(x) for x in stat_line.split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def busy_fraction(samples: list[tuple[int, int, int]], warmup: int) -> float | None:
    """The machine's CPU use between the first and the last sample (steps logged, busy,
    total) taken once more than ``warmup`` steps were logged; None without two of them."""
    steady = [(busy, total) for lines, busy, total in samples if lines > warmup]
    if len(steady) < 2 or steady[-1][1] == steady[0][1]:
        return None
    return (steady[-1][0] - steady[0][0]) / (steady[-1][1] - steady[0][1])


class CpuSampler(threading.Thread):
    """Samples /proc/stat and the number of lines of a run's metrics.jsonl every
    ``interval`` seconds until stopped."""

    def __init__(self, metrics: Path, interval: float = 0.5):
        super().__init__(daemon=True)
        self.metrics, self.interval = metrics, interval
        self.samples: list[tuple[int, int, int]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            lines = (len(self.metrics.read_bytes().splitlines())
                     if self.metrics.is_file() else 0)
            with open("/proc/stat", encoding="ascii") as f:
                busy, total = cpu_times(f.readline())
            self.samples.append((lines, busy, total))

    def stop(self) -> list[tuple[int, int, int]]:
        """Stop sampling; every sample taken."""
        self._done.set()
        self.join()
        return self.samples


def run_point(config: str, overrides: list[str], point: ScalePoint, *, compute_ms: float,
              time_scale: float, steps: int, warmup: int) -> dict:
    """One ``dba3c launch`` of synthetic ranks; its steady step time, efficiency,
    throughput and the machine's CPU use."""
    from launch.bench import RssSampler

    cfg = load_config(config, [*overrides, *point.overrides()])
    with tempfile.TemporaryDirectory(prefix="dba3c-scale-") as run_dir:
        cmd = [sys.executable, "-m", "dba3c", "launch", config, "--workers", str(point.workers),
               "--ps", str(point.ps), *overrides, *point.overrides(), "synthetic.enabled=true",
               f"synthetic.compute_ms={compute_ms * time_scale:g}", "eval.every=0",
               "eval.rank=false", f"train.max_steps={steps}", "train.max_seconds=0",
               "run.progress=none", "run.log_every=1", "run.checkpoint_every=0",
               f"run.dir={run_dir}"]
        sampler = CpuSampler(RunDir(run_dir).metrics_path)
        sampler.start()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        rss = RssSampler(proc.pid, interval=0.5)
        rss.start()
        _, err = proc.communicate()
        samples, peak_mb = sampler.stop(), rss.stop()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err[-2000:]}")
        metrics = RunDir(run_dir).read_metrics()
    step_s = steady_step_seconds(metrics, warmup) / time_scale
    replicas = point.replicas or point.workers
    return {**asdict(point), "step_ms": 1000 * step_s,
            "efficiency": compute_ms / 1000 / step_s,
            "data_points_per_s": replicas * cfg.train.batch_size / step_s,
            "cpu_busy": busy_fraction(samples, warmup),
            "peak_rss_mb": peak_by_role(peak_mb, point.ps)}


def peak_by_role(peak_mb: dict[str, float], num_ps: int) -> dict[str, float]:
    """The largest peak RSS (MB) among the chief (rank 0), the parameter servers (ranks
    1..P) and the other workers, from peaks keyed ``rankR``."""
    roles: dict[str, float] = {}
    for key, mb in peak_mb.items():
        if key.startswith("rank"):
            rank = int(key[4:])
            role = "chief" if rank == 0 else "ps" if rank <= num_ps else "worker"
            roles[role] = max(roles.get(role, 0.0), mb)
    return roles


def run_scale(config: str, overrides: list[str], quick: bool, compute_ms: float | None,
              time_scale: float,
              progress: Callable[[str], None] = lambda text: print(text, file=sys.stderr,
                                                                   flush=True)) -> dict:
    """Every point of the grid; the results as one JSON-able dict."""
    from launch.bench import machine_description

    steps, warmup = (15, 5) if quick else (40, 10)
    grid = scale_grid(quick)
    results: dict[str, Any]  # JSON
    results = {"config": config, "overrides": list(overrides), "quick": quick,
               "date": date.today().isoformat(), "machine": machine_description(),
               "compute_ms": compute_ms or DEFAULT_COMPUTE_MS,
               "compute_ms_source": "--compute-ms" if compute_ms else COMPUTE_MS_SOURCE,
               "time_scale": time_scale, "steps": steps, "warmup_steps": warmup,
               "links": "shared memory on one host (not time-scaled)", "points": []}
    for i, point in enumerate(grid):
        progress(f"bench --scale {i + 1}/{len(grid)}: {point}")
        results["points"].append(run_point(config, overrides, point,
                                           compute_ms=results["compute_ms"],
                                           time_scale=time_scale, steps=steps,
                                           warmup=warmup))
    return results


def scale_table(r: dict, command: str) -> str:
    """The results as a dated markdown section for docs/benchmarks.md."""
    rows = []
    for p in r["points"]:
        backup = f"{p['replicas']}/{p['workers']}" if p["replicas"] else "all"
        slow = (f"{p['slow_workers']} x{p['slow_factor']:g}" if p["slow_workers"] else "none")
        cpu = "?" if p["cpu_busy"] is None else f"{100 * p['cpu_busy']:.0f}%"
        rss = max(p["peak_rss_mb"].values(), default=0.0)
        rows.append(f"| {p['workers']} | {p['ps']} | {p['hidden']} | {backup} | {slow} | "
                    f"{p['step_ms']:.1f} | {p['efficiency']:.2f} | "
                    f"{p['data_points_per_s']:.0f} | {cpu} | {rss:.0f} |")
    return "\n".join([
        f"## `dba3c bench --scale{' --quick' if r['quick'] else ''}` on {r['date']}", "",
        f"Command: `{command}`  ", (f"Machine: {r['machine']}; config `{r['config']}` "
                                    f"{' '.join(r['overrides'])}"), "",
        (f"Synthetic-compute ranks, T_c = {r['compute_ms']:.1f} ms ({r['compute_ms_source']}), "
         f"time scale s = {r['time_scale']:g} (each worker waits T_c x s per step); step time "
         f"= steady step time / s over steps {r['warmup_steps'] + 1}-{r['steps']}; E = T_c / "
         f"T_step. Links: {r['links']}, so this measures the protocol and the parameter "
         f"servers, not a network. CPU: the machine's use in the steady window."), "",
        ("| W | P | FC | gradients per step | stragglers | step, ms | E | data points/s | CPU "
         "| peak RSS of a rank, MB |"), "|---|---|---|---|---|---|---|---|---|---|", *rows,
        ""]) + "\n"


def scale_command(config: str, overrides: list[str], quick: bool, compute_ms: float | None,
                  time_scale: float, out_json: Path, docs: Path) -> str:
    """Run the grid, write ``out_json`` and append the markdown section to ``docs``; return
    the section."""
    from launch.bench import _command_line, _record

    results = run_scale(config, overrides, quick, compute_ms, time_scale)
    options = (" --scale" + (" --quick" if quick else "")
               + (f" --compute-ms {compute_ms:g}" if compute_ms else "")
               + f" --time-scale {time_scale:g}")
    table = scale_table(results, _command_line(options, config, overrides))
    _record(results, table, out_json, docs)
    return table
