"""``dba3c sweep``: a grid of runs, each in its own run directory under one sweep directory,
summarised in ``SWEEP/sweep.csv`` (what ``dba3c plot SWEEP`` reads).

    dba3c sweep configs/breakout.yaml --grid dist.ps=1,2 --grid model.hidden=64,256 \\
        --workers 2 --max-seconds 120
    dba3c sweep configs/breakout_64.yaml --grid dist.workers=1,2,4,8 --launcher slurm

``--launcher local`` runs the points one after another as local dry runs (``dba3c launch``,
or one process when the layout is a single rank); ``--launcher slurm`` submits one submitit job
per point and waits: by default each rank of a point has a node and all its CPUs, and a
point's time limit is its ``train.max_seconds`` plus a margin
(:mod:`dba3c.launchers.slurm_site`; ``--tasks-per-node``, ``--cpus-per-task``, ``--time`` and
the site's options change that). The CSV is rewritten after every finished point, so an
interrupted sweep keeps what it measured; rerunning it skips points whose run directory
already has a ``summary.json`` and whose row says ``ok``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from dba3c.config import Config
from dba3c.distributed.roles import make_roles, required_world_size
from dba3c.errors import UserError
from dba3c.launchers.local import launch_command
from dba3c.launchers.slurm_site import SlurmSite, nodes_for, time_limit_minutes
from dba3c.launchers.submit import grid_overrides, point_name
from dba3c.outputs import check_output_dir, make_output_dir
from dba3c.preset import load_config
from dba3c.training.metrics import steady_throughput
from dba3c.training.rundir import RunDir, SweepDir

T = TypeVar("T")


def _read_or_warn(read: Callable[[], T], empty: T) -> T:
    """What ``read`` returns, or ``empty`` (with a warning) when the file is malformed."""
    try:
        return read()
    except ValueError as e:
        print(f"sweep: warning: {e}", file=sys.stderr)
        return empty


def point_result(run_dir: Path, returncode: int) -> dict:
    """The sweep.csv result columns of one finished point, read from its run directory."""
    run = RunDir(run_dir)
    summary: dict = _read_or_warn(run.read_summary, {})
    evals: list[dict] = _read_or_warn(run.read_evals, [])
    ok = returncode == 0 and bool(summary)
    return {"data_points_per_s": steady_throughput(_read_or_warn(run.read_metrics, [])),
            "time_to_target_s": summary.get("time_to_target_s"),
            "final_eval_mean": evals[-1]["mean"] if evals else None,
            "status": "ok" if ok else f"failed (exit {returncode})"}


class Point:
    """One grid point: its overrides, config, run directory and world size."""

    def __init__(self, config: str, base: list[str], combo: list[str], sweep_dir: Path,
                 index: int, workers: int | None):
        self.combo = combo
        self.name = point_name(index, combo)
        self.run_dir = sweep_dir / self.name
        self.overrides = [*base, *combo, f"run.dir={self.run_dir}"]
        self.cfg: Config = load_config(config, self.overrides)
        distributed = bool(self.cfg.dist.workers or workers)  # else one process
        self.workers = self.cfg.dist.workers or workers or 1
        self.world = required_world_size(self.cfg, self.workers) if distributed else 1
        make_roles(self.world, self.cfg)  # refuse impossible layouts before anything runs

    def row(self, result: dict) -> dict:
        """The sweep.csv row: run directory (relative to the sweep), grid values, results."""
        values = dict(c.split("=", 1) for c in self.combo)
        return {"run_dir": self.name, **values, **result}


def make_points(config: str, grid: list[str], overrides: list[str], sweep_dir: Path,
                workers: int | None, max_seconds: float | None) -> list[Point]:
    """Every grid point, validated up front: one UserError lists every bad point."""
    if not grid:
        raise UserError("a sweep needs at least one --grid KEY=v1,v2")
    base = list(overrides) + ([f"train.max_seconds={max_seconds}"]
                              if max_seconds is not None else [])
    points, errors = [], []
    for i, combo in enumerate(grid_overrides(grid)):
        try:
            points.append(Point(config, base, combo, sweep_dir, i, workers))
        except UserError as e:
            errors.append(f"{' '.join(combo)}: {e}")
    if errors:
        raise UserError("; ".join(errors))
    return points


def run_local(point: Point, config: str, log: Path) -> int:
    """Run one point as a local dry run; its output goes to ``log``. Returns the exit code."""
    if point.world == 1:
        cmd = [sys.executable, "-m", "dba3c", "train", config, *point.overrides]
    else:
        cmd = launch_command(config, point.overrides, workers=point.workers, ps=None,
                             evaluator=False)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("MPIR_CVAR_CH4_CMA_ENABLE", "1")
    with open(log, "w", encoding="utf-8") as out:
        return subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)


def run_slurm(points: list[Point], config: str, sweep_dir: Path,
              request: SlurmRequest) -> list[int]:
    """Submit every point as a submitit job (one array per node count and time limit) and
    wait; exit code per point."""
    import submitit

    from dba3c.launchers.submit import TrainJob, make_executor, submit_all

    codes = []
    by_shape: dict[tuple[int, int], list[Point]] = {}
    for p in points:
        shape = (nodes_for(p.world, request.tasks_per_node),
                 time_limit_minutes(p.cfg.train.max_seconds, request.minutes))
        by_shape.setdefault(shape, []).append(p)
    jobs = {}
    for (nodes, minutes), group in by_shape.items():
        executor = make_executor(folder=str(SweepDir(sweep_dir).submitit_dir / "%j"),
                                 cluster="slurm", nodes=nodes,
                                 tasks_per_node=request.tasks_per_node, minutes=minutes,
                                 site=request.site, cpus_per_task=request.cpus_per_task)
        submitted = submit_all(executor, [TrainJob(config, p.overrides) for p in group])
        jobs.update({p.name: job for p, job in zip(group, submitted)})
    for p in points:
        job = jobs[p.name]
        print(f"sweep: {p.name}: Slurm job {job.job_id}", file=sys.stderr, flush=True)
        try:
            job.results()
            codes.append(0)
        except (submitit.core.utils.UncompletedJobError, submitit.core.utils.FailedJobError) \
                as e:
            print(f"sweep: {p.name} failed: {str(e).splitlines()[0]}", file=sys.stderr)
            codes.append(1)
    return codes


@dataclass(frozen=True)
class SlurmRequest:
    """What ``--launcher slurm`` asks of Slurm for every point (None: the defaults of
    :mod:`dba3c.launchers.slurm_site`)."""

    tasks_per_node: int = 1
    cpus_per_task: int | None = None
    minutes: int | None = None
    site: SlurmSite = field(default_factory=SlurmSite)


def run_sweep(config: str, grid: list[str], overrides: list[str], *, sweep_dir: str | None,
              launcher: str, workers: int | None, max_seconds: float | None,
              slurm: SlurmRequest | None = None) -> Path:
    """Run the grid and write ``sweep.csv``; returns its path."""
    name = Path(config).stem
    root = Path(sweep_dir or f"runs/sweep-{name}")
    label = f"--dir {root}" if sweep_dir else f"the sweep directory {root} (--dir)"
    check_output_dir(root, label)
    points = make_points(config, grid, overrides, root, workers, max_seconds)
    slurm = slurm or SlurmRequest()
    if launcher == "slurm":  # every point's nodes hold its ranks: refused before any job
        for p in points:
            nodes_for(p.world, slurm.tasks_per_node)
    keys = [item.partition("=")[0] for item in grid]
    sweep = SweepDir(root)
    try:
        done = {row["run_dir"]: row for row in sweep.read_rows() if row["status"] == "ok"}
    except ValueError as e:
        raise UserError(f"{e}; this sweep cannot continue it: use another --dir") from None
    make_output_dir(root, label)
    rows: dict[str, dict] = {}
    todo = []
    for p in points:
        if p.name in done and RunDir(p.run_dir).summary_path.is_file():
            rows[p.name] = done[p.name]
            print(f"sweep: {p.name}: done already, kept", file=sys.stderr, flush=True)
        else:
            todo.append(p)
    if launcher == "slurm" and todo:
        for p, code in zip(todo, run_slurm(todo, config, root, slurm)):
            rows[p.name] = p.row(point_result(p.run_dir, code))
    for i, p in enumerate(todo if launcher == "local" else []):
        started = time.monotonic()
        print(f"sweep {i + 1}/{len(todo)}: {' '.join(p.combo)} ({p.world} rank"
              f"{'s' if p.world > 1 else ''}) -> {p.run_dir}", file=sys.stderr, flush=True)
        p.run_dir.mkdir(parents=True, exist_ok=True)
        log = RunDir(p.run_dir).sweep_log_path
        code = run_local(p, config, log)
        rows[p.name] = p.row(point_result(p.run_dir, code))
        sweep.write_rows(keys, [rows[q.name] for q in points if q.name in rows])
        r = rows[p.name]
        rate = (f"{r['data_points_per_s']:.0f} data points/s" if r["data_points_per_s"]
                else f"no metrics (see {log})")
        print(f"sweep {i + 1}/{len(todo)}: {r['status']} in {time.monotonic() - started:.0f} s,"
              f" {rate}", file=sys.stderr, flush=True)
    sweep.write_rows(keys, [rows[p.name] for p in points])
    return sweep.csv_path
