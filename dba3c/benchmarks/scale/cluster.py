"""``dba3c bench scale``'s driver: the grid's points run on the emulated cluster.

Every grid point is a run of synthetic workers (no TensorFlow, see
``dba3c/distributed/synthetic.py``) on
the emulated cluster of ``slurm/local-cluster.sh``: one rank per emulated node, so every
worker and parameter server has its own shaped link. Consecutive points with the same link
rate run as one MPI job (``dba3c/benchmarks/scale/job.py``) of as many ranks as the largest of
them, which starts its ranks, imports and connections once; a job that fails or runs past
``--point-timeout`` in a point is ended whole (``dba3c/benchmarks/proctree.py``), the point
recorded as failed, and the points after it run in a new job. W workers, P
parameter servers, the paper network at FC H, optionally backup workers (R of W gradients per
step) and stragglers, over links of 10 or 100 Gb/s; or with ``--aggregation collective`` the
same W without parameter servers (each worker owns a shard: reduce-scatter, Adam,
allgather). Time is scaled by s: links run at
rate / s and each worker computes for T_c x s per step, so the many ranks of a 64-worker point
leave the machine unsaturated; the steady-state step time divided by s estimates the real
one, and the scaling efficiency is E = T_c / T_step. The machine's CPU use in the steady
window is reported so a saturated point can be told apart, and each point carries the
analytic model's step time (:func:`~dba3c.benchmarks.scale.model.model_step_seconds`) for
comparison. The grid is :mod:`dba3c.benchmarks.scale.grid`; the Markdown table and the
command's files, :mod:`dba3c.benchmarks.scale.report`.

The cluster is started once with as many nodes as the largest point has ranks (a smaller
point uses the first nodes), reshaped once per link rate, and stopped at the end.
"""


from __future__ import annotations

import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import date
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import IO, Any, TypeVar

from dba3c.benchmarks.emulated import EmulatedCluster, link_rate, require_emulation
from dba3c.benchmarks.proctree import EXITED, INTERRUPTED, TIMED_OUT, Interrupt, ProcessTree
from dba3c.benchmarks.scale.grid import (
    EVERY_POINT,
    ScalePoint,
    Selection,
    collective_grid,
    grid_time_scales,
    point_label,
    scale_grid,
    select_points,
    steps_for,
)
from dba3c.benchmarks.scale.job import JobRun, job_event, write_job
from dba3c.benchmarks.scale.model import Bucket, model_step_seconds, net_buckets
from dba3c.config import Config, DistConfig
from dba3c.cpus import machine_description
from dba3c.distributed.roles import overlaps, required_world_size
from dba3c.errors import Interrupted, UserError
from dba3c.games.envs import env_spaces, spaces_key
from dba3c.launchers.peak_rss import RssSampler
from dba3c.learning.models import make_net_spec
from dba3c.preset import load_config, num_params_of
from dba3c.training.rundir import RunDir

_T = TypeVar("_T")

# T_c assumed for one 12-core node of the paper: docs/benchmarks.md measured 77 ms per step on
# 2 cores and scales it by 2/12 at equal efficiency (~13 ms); an assumption, not a measurement
DEFAULT_COMPUTE_MS = 77.0 * 2 / 12
COMPUTE_MS_SOURCE = ("assumed: 77 ms per step measured on 2 cores (docs/benchmarks.md) "
                     "x 2/12 for a 12-core node")
STALL_TIMEOUT_S = 60.0  # a point whose steps stop ends after this, not after the default 300 s
# --point-timeout's default: a point still running after this is ended (steps that crawl at
# 50 s each never trip the stall watchdog; one ran for 8 minutes)
POINT_TIMEOUT_S = 300.0
# Records a point's steady step time needs (steps after the warm-up, less the run's last): with
# 4, a chief that logged two steps one step late at the window's start halved the estimate;
# steps logged one step late, in runs of any length starting anywhere, never moved it by more
# than 3% from 6 records on (docs/benchmarks.md, "Emulated-cluster figures: how they are
# measured"; test_a_point_plans_enough_steps_for_late_steps_at_its_windows_start)
MIN_STEADY_RECORDS = 6


def buckets_of(cfg: Config) -> tuple[Bucket, ...]:
    """:func:`~dba3c.benchmarks.scale.model.net_buckets` of the configured network (its env's
    spaces: a simulator opened once per process, :func:`~dba3c.games.envs.env_spaces`)."""
    return net_buckets(make_net_spec(cfg.model, *env_spaces(cfg)))


def steady_step_seconds(metrics: list[dict], warmup: int) -> float:
    """Seconds per global step after the first ``warmup`` steps: the median, per step, of
    the chief's ``time_s`` differences between neighbouring records and between records two
    apart. A chief that trains logs the steps it learnt of when it next waits, so a step can
    be logged late, together with the next: once in a while (intervals 0.66, 1.32, 0.01 s for
    a steady 0.66 s: the neighbours' median ignores such a pair) or at every other step
    (1.37, 0.01, 1.37, ...: the neighbours' median is half a step; the spans of two steps
    are exact there). Together their median holds in both cases, where the slope
    between the window's ends or the median slope between all pairs would not (a pair at
    the end of a short window pulled the latter 10% under the true step). The last record
    is left out: the run's final step is logged a few ms after the one before it (measured:
    4-9 ms in a 2-worker run stepping every 110 ms). A late step at the window's start has
    no span into it, only spans out of it, all short: a window needs ``MIN_STEADY_RECORDS``
    records for the median to hold (:class:`PointPlan`)."""
    tail = [m for m in metrics if m["step"] > warmup][:-1]
    if len(tail) < 2:
        raise ValueError(f"{len(tail)} metrics records after a warm-up of {warmup} steps: "
                         f"need at least 2")
    spans = [*pairwise(tail), *zip(tail, tail[2:])]
    return median((b["time_s"] - a["time_s"]) / (b["step"] - a["step"]) for a, b in spans)


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


@dataclass(frozen=True)
class PointPlan:
    """A point as the bench runs it: at time scale ``time_scale``, ``steps`` steps of which
    the first ``warmup`` are left out of the steady step time."""

    point: ScalePoint
    time_scale: float
    steps: int
    warmup: int

    def __post_init__(self) -> None:
        if self.steps - self.warmup - 1 < MIN_STEADY_RECORDS:
            raise ValueError(f"{self.steps} steps with {self.warmup} of warm-up leave "
                             f"{self.steps - self.warmup - 1} records for the steady step "
                             f"time: need at least {MIN_STEADY_RECORDS}")


def point_overrides(plan: PointPlan, poll: DistConfig, compute_ms: float,
                    run_dir: Path) -> list[str]:
    """The overrides of a point's synthetic run in ``run_dir``: its own (:meth:`ScalePoint.
    overrides`; an overlapping point overlaps from its first step), T_c x s of compute, no
    evaluation, a metrics record every step, the stall watchdog at ``STALL_TIMEOUT_S``, and
    the poll caps of ``poll`` x s."""
    s = plan.time_scale
    return [*plan.point.overrides(), "synthetic.enabled=true", "dist.overlap_probe_steps=0",
            f"synthetic.compute_ms={compute_ms * s:g}", "eval.every=0", "eval.rank=false",
            f"train.max_steps={plan.steps}", "train.max_seconds=0", "run.progress=none",
            "run.log_every=1", "run.checkpoint_every=0",
            f"dist.stall_timeout={STALL_TIMEOUT_S:g}",
            f"dist.poll_max_ms={poll.poll_max_ms * s:g}",
            f"dist.collective_poll_us={poll.collective_poll_us * s:g}", f"run.dir={run_dir}"]


def point_result(plan: PointPlan, cfg: Config, metrics: list[dict],
                 samples: list[tuple[int, int, int]], peak_mb: dict[str, float],
                 compute_ms: float, host_bytes_per_s: float | None) -> dict:
    """What a point measured (its ``metrics`` records, CPU ``samples``, peak RSS by rank)
    beside the analytic model's step time (with ``host_bytes_per_s`` also the model with the
    emulating host's cores as a limit, :func:`~dba3c.benchmarks.scale.model.host_seconds`)."""
    point, s = plan.point, plan.time_scale
    step_s = steady_step_seconds(metrics, plan.warmup) / s
    replicas = point.replicas or point.workers
    num_params, buckets = num_params_of(cfg), buckets_of(cfg)
    # the point's poll caps are multiplied by its time scale (job_runs)
    algorithm, poll_s = cfg.dist.collective_algorithm, cfg.dist.collective_poll_s / s
    staged_cost, replicated = cfg.dist.overlap_cost, cfg.dist.replicate_first_bucket
    ahead = cfg.dist.gather_ahead == "always"  # the bench runs no probe: auto is never
    model_s = model_step_seconds(point, num_params, compute_ms / 1000, s, algorithm=algorithm,
                                 poll_s=poll_s, buckets=buckets, staged_cost=staged_cost,
                                 replicated_first=replicated, ahead=ahead)
    emulated_s = model_step_seconds(point, num_params, compute_ms / 1000, s, host_bytes_per_s,
                                    algorithm, poll_s, buckets, staged_cost, replicated, ahead)
    return {**asdict(point), "time_scale": s, "steps": plan.steps,
            "warmup_steps": plan.warmup, "step_ms": 1000 * step_s,
            "model_step_ms": 1000 * model_s, "emulated_model_step_ms": 1000 * emulated_s,
            "efficiency": compute_ms / 1000 / step_s,
            "data_points_per_s": replicas * cfg.train.batch_size / step_s,
            "cpu_busy": busy_fraction(samples, plan.warmup),
            "peak_rss_mb": peak_by_role(peak_mb, point.ps,
                                        required_world_size(cfg, point.workers))}


def failed_point(plan: PointPlan, error: str) -> dict:
    """The record of a point that could not be measured."""
    return {**asdict(plan.point), "time_scale": plan.time_scale, "error": error[-1000:]}


def job_groups(plans: list[PointPlan]) -> list[list[PointPlan]]:
    """The MPI jobs of a grid: runs of consecutive points with the same link rate and time
    scale, so the same shaped rate (the emulated cluster is reshaped only between jobs)."""
    def shape(plan: PointPlan) -> tuple[int, float]:
        return plan.point.link_gbit, plan.time_scale

    groups: list[list[PointPlan]] = []
    for plan in plans:
        if groups and shape(groups[-1][-1]) == shape(plan):
            groups[-1].append(plan)
        else:
            groups.append([plan])
    return groups


def unfinished(points: Sequence[_T], ended: int) -> tuple[_T | None, list[_T]]:
    """After a job that ended (its end line) the first ``ended`` of its ``points``: the point
    it was running when it stopped (None: it ended every one) and the points after that one,
    which a new job runs."""
    if ended >= len(points):
        return None, []
    return points[ended], list(points[ended + 1:])


def job_failure(how: str, returncode: int | None, stderr_tail: str, timeout_s: float,
                logged: int, steps: int) -> str:
    """Why the point a job was running did not end: ended past ``--point-timeout`` with
    ``logged`` of its ``steps`` steps logged, or the job exited (its stderr's tail)."""
    if how == TIMED_OUT:
        return timeout_message(timeout_s, logged, steps)
    return f"job exited {returncode}: {stderr_tail}"


def job_runs(config: str, overrides: list[str], plans: list[PointPlan], compute_ms: float,
             run_dirs: list[Path]) -> list[JobRun]:
    """The runs of a job for these points (each in its run directory of ``run_dirs``), laid
    out as ``dba3c launch --workers W --ps P`` would."""
    from dba3c.launchers.local import launch_layout

    runs = []
    for plan, run_dir in zip(plans, run_dirs, strict=True):
        poll = load_config(config, [*overrides, *plan.point.overrides()]).dist
        extra, ranks = launch_layout(
            config, [*overrides, *point_overrides(plan, poll, compute_ms, run_dir)],
            workers=plan.point.workers, ps=plan.point.ps, evaluator=False)
        runs.append(JobRun(config, tuple(extra), ranks))
    return runs


class _JobWatch:
    """The driver's side of a running job: rank 0's start / end lines (read by a thread,
    handled in the waiting thread by :meth:`deadline`) start and stop the point's CPU
    sampler and peak RSS, and an ended point is measured at once."""

    def __init__(self, run_dirs: list[Path], stdout: IO[str], rss: RssSampler,
                 point_timeout: float,
                 measure: Callable[[int, list[tuple[int, int, int]], dict[str, float]], None]):
        self.run_dirs = run_dirs
        self.rss, self.point_timeout, self.measure = rss, point_timeout, measure
        self.ended, self.started_at = 0, time.monotonic()  # job start counts till point 0's
        self._events: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
        self._cpu: CpuSampler | None = None
        self._reader = threading.Thread(target=self._read, args=(stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            event = job_event(line)
            if event is not None:
                self._events.put(event)

    def deadline(self) -> float:
        """Handle the lines read so far; when the running point must have ended."""
        while not self._events.empty():
            kind, index = self._events.get()
            if kind == "start":
                self.started_at = time.monotonic()
                self._cpu = CpuSampler(RunDir(self.run_dirs[index]).metrics_path)
                self._cpu.start()
                self.rss.restart()
            elif self._cpu is not None:
                samples, self._cpu = self._cpu.stop(), None
                self.ended = index + 1
                self.measure(index, samples, self.rss.restart())
        return self.started_at + self.point_timeout

    def finish(self, drain: bool) -> None:
        """After the job: handle the last lines if ``drain`` (not when the job was ended: rank
        0 stops a run early on SIGTERM, and that run did not end by itself)."""
        self._reader.join()
        if drain:
            self.deadline()
        if self._cpu is not None:
            self._cpu.stop()


def run_points(config: str, overrides: list[str], plans: list[PointPlan], *,
               compute_ms: float, mpiexec_args: list[str] | None = None,
               host_bytes_per_s: float | None = None, point_timeout: float = POINT_TIMEOUT_S,
               interrupt: Interrupt | None = None,
               done: Callable[[PointPlan, dict], None] = lambda plan, result: None
               ) -> list[dict]:
    """The points of ``plans`` in order as one MPI job of synthetic ranks
    (``dba3c.benchmarks.scale.job``; with ``mpiexec_args``: on the emulated cluster), until one
    fails: a record per point, handed to ``done`` as soon as it is known (:func:`point_result`,
    or :func:`failed_point` when the job exits or runs past ``point_timeout`` seconds in one
    point, counted from its start line; then the job's whole process tree is ended and the
    records stop there: the caller runs the rest as a new job). A signal caught by
    ``interrupt`` ends the tree and raises :class:`~dba3c.errors.Interrupted`."""
    from dba3c.launchers.local import find_mpiexec, launch_environment

    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dba3c-scale-") as tmp, \
            tempfile.TemporaryFile("w+") as stderr:
        run_dirs = [Path(tmp) / f"point{i}" for i in range(len(plans))]
        runs = job_runs(config, overrides, plans, compute_ms, run_dirs)
        configs = [load_config(r.config, list(r.overrides)) for r in runs]
        spaces = {spaces_key(c): env_spaces(c) for c in configs}  # opened here, not per rank
        write_job(Path(tmp) / "job.json", runs, list(spaces.items()))
        cmd = [find_mpiexec(), *(mpiexec_args or []), "-n", str(max(r.ranks for r in runs)),
               sys.executable, "-m", "dba3c.benchmarks.scale.job", str(Path(tmp) / "job.json")]

        def measure(index: int, samples: list[tuple[int, int, int]],
                    peak_mb: dict[str, float]) -> None:
            plan, metrics = plans[index], RunDir(run_dirs[index]).read_metrics()
            try:
                r = point_result(plan, configs[index], metrics, samples, peak_mb, compute_ms,
                                 host_bytes_per_s)
            except ValueError as e:  # too few steps logged to measure
                r = failed_point(plan, str(e))
            results.append(r)
            done(plan, r)

        tree = ProcessTree(cmd, env=launch_environment(), stdout=subprocess.PIPE,
                           stderr=stderr, text=True)
        rss = RssSampler(tree.pid, interval=0.5)
        rss.start()
        assert tree.proc.stdout is not None
        watch = _JobWatch(run_dirs, tree.proc.stdout, rss, point_timeout, measure)
        how = tree.wait(interrupt, watch.deadline)
        watch.finish(drain=how == EXITED)
        rss.stop()
        if how == INTERRUPTED:
            assert interrupt is not None and interrupt.signum is not None
            raise Interrupted(interrupt.signum)
        stopped, _ = unfinished(plans, watch.ended)
        if stopped is not None:
            stderr.seek(0)
            logged = logged_steps(RunDir(run_dirs[watch.ended]).read_metrics())
            r = failed_point(stopped, job_failure(how, tree.returncode, stderr.read()[-2000:],
                                                  point_timeout, logged, stopped.steps))
            results.append(r)
            done(stopped, r)
    return results


def run_point(config: str, overrides: list[str], point: ScalePoint, *, compute_ms: float,
              time_scale: float, steps: int, warmup: int,
              mpiexec_args: list[str] | None = None,
              host_bytes_per_s: float | None = None,
              point_timeout: float = POINT_TIMEOUT_S,
              interrupt: Interrupt | None = None) -> dict:
    """One point as an MPI job of its own (:func:`run_points`): its steady step time,
    efficiency, throughput, the machine's CPU use, peak RSS by role and the analytic model's
    step time. A point that fails, or runs longer than ``point_timeout`` seconds, is a
    RuntimeError saying why."""
    [r] = run_points(config, overrides, [PointPlan(point, time_scale, steps, warmup)],
                     compute_ms=compute_ms, mpiexec_args=mpiexec_args,
                     host_bytes_per_s=host_bytes_per_s, point_timeout=point_timeout,
                     interrupt=interrupt)
    if "error" in r:
        raise RuntimeError(r["error"])
    return r


def logged_steps(metrics: list[dict]) -> int:
    """The last global step in a run's metrics records (0 before the first)."""
    return max((m["step"] for m in metrics), default=0)


def timeout_message(seconds: float, logged: int, steps: int) -> str:
    """Why a point that ran past ``--point-timeout`` was ended."""
    return f"timed out after {seconds:g} s ({logged} of {steps} steps logged)"


def peak_by_role(peak_mb: dict[str, float], num_ps: int,
                 num_ranks: int | None = None) -> dict[str, float]:
    """The largest peak RSS (MB) among the chief (rank 0), the parameter servers (ranks
    1..P) and the other workers, from peaks keyed ``rankR`` (only ranks below ``num_ranks``
    when given: a job's ranks that sat the point out are left out)."""
    roles: dict[str, float] = {}
    for key, mb in peak_mb.items():
        if key.startswith("rank") and (num_ranks is None or int(key[4:]) < num_ranks):
            rank = int(key[4:])
            role = "chief" if rank == 0 else "ps" if rank <= num_ps else "worker"
            roles[role] = max(roles.get(role, 0.0), mb)
    return roles


def num_nodes(config: str, overrides: list[str], grid: list[ScalePoint]) -> int:
    """Emulated nodes the grid needs: one per rank of its largest point."""
    return max(required_world_size(load_config(config, [*overrides, *p.overrides(),
                                                        "eval.rank=false",
                                                        f"dist.ps={p.ps}"]), p.workers)
               for p in grid)


def grid_net(config: str, overrides: list[str], grid: list[ScalePoint],
             of: Callable[[Config], _T]) -> Callable[[ScalePoint], _T]:
    """``of`` the network at each point of ``grid`` (:func:`num_params_of`,
    :func:`buckets_of`: they depend on FC only), each FC's config loaded once."""
    values = {p.hidden: of(load_config(config, [*overrides, *p.overrides()]))
              for p in {p.hidden: p for p in grid}.values()}
    return lambda point: values[point.hidden]


def points_wire_dtype(cfg: Config, wire_dtype: str | None) -> str:
    """The type on the wire at every point: ``wire_dtype`` (``--wire-dtype``),
    else ``cfg``'s ``dist.wire_dtype``. A UserError when ``cfg`` sets one other than the
    default and ``wire_dtype`` another (the points' overrides would silently replace it)."""
    configured = cfg.dist.wire_dtype
    if wire_dtype and configured not in (wire_dtype, DistConfig.wire_dtype):
        raise UserError(f"--wire-dtype {wire_dtype} and dist.wire_dtype={configured} of the "
                        f"config disagree (give one of them)")
    return wire_dtype or configured


def run_scale(config: str, overrides: list[str], quick: bool, compute_ms: float | None,
              time_scale: float, aggregation: str = "ps", chosen: Selection = EVERY_POINT,
              point_timeout: float = POINT_TIMEOUT_S,
              progress: Callable[[str], None] = lambda text: print(text, file=sys.stderr,
                                                                   flush=True),
              partial: Callable[[dict], None] = lambda results: None,
              wire_dtype: str | None = None) -> dict:
    """Every point of the grid on the emulated cluster (started with as many nodes as the
    largest point has ranks, reshaped per link rate, stopped at the end); the results as
    one JSON-able dict, also handed to ``partial`` after each point. A point that fails, or
    runs longer than ``point_timeout`` seconds, is recorded with its error and the grid goes
    on. SIGINT or SIGTERM ends the running point's processes and raises
    :class:`~dba3c.errors.Interrupted` (the points so far went to ``partial``).
    ``aggregation`` collective measures
    :func:`~dba3c.benchmarks.scale.grid.collective_grid` instead; ``chosen`` keeps only the
    points it selects (:func:`~dba3c.benchmarks.scale.grid.select_points`). Every point's
    gradients travel in ``wire_dtype`` (``--wire-dtype``; None: the config's
    ``dist.wire_dtype``, which must then not say otherwise)."""
    grid = select_points(collective_grid(quick) if aggregation == "collective"
                         else scale_grid(quick), chosen)
    cfg = load_config(config, overrides)
    wire = points_wire_dtype(cfg, wire_dtype)
    overlap = overlaps(cfg)  # dist.collective_overlap, in effect
    grid = [replace(p, overlap=overlap and p.aggregation == "collective", wire_dtype=wire)
            for p in grid]
    require_emulation()  # before anything is printed or started
    source = "--compute-ms" if compute_ms else COMPUTE_MS_SOURCE
    compute_ms = compute_ms or DEFAULT_COMPUTE_MS
    results: dict[str, Any]  # JSON
    results = {"config": config, "overrides": list(overrides), "quick": quick,
               "aggregation": aggregation,
               "collective_algorithm": cfg.dist.collective_algorithm, "wire_dtype": wire,
               "date": date.today().isoformat(), "machine": machine_description(),
               "compute_ms": compute_ms, "compute_ms_source": source, "time_scale": time_scale,
               "links": "emulated cluster: one rank per network namespace, htb-shaped veth "
                        "links at rate / s both ways, MPI over TCP",
               "points": []}
    nodes, t0 = num_nodes(config, overrides, grid), time.monotonic()
    scales = grid_time_scales(grid, time_scale, grid_net(config, overrides, grid, num_params_of),
                              compute_ms / 1000, grid_net(config, overrides, grid, buckets_of))
    plans = [PointPlan(p, s, *steps_for(p, quick)) for p, s in zip(grid, scales, strict=True)]
    first_rate = link_rate(grid[0].link_gbit, plans[0].time_scale)
    progress(f"bench scale: starting the emulated cluster ({nodes} nodes, links "
             f"{first_rate}); T_c = {compute_ms:.1f} ms ({results['compute_ms_source']})")
    with Interrupt() as interrupt, EmulatedCluster(nodes, first_rate) as emulated:
        interrupt.check()
        mpiexec_args = emulated.mpiexec_args()
        results["host_bytes_per_s"] = host = emulated.host_bytes_per_s()
        progress(f"bench scale: MPI over unshaped links moves {host / 1e6:.0f} MB/s on this "
                 f"host (in the model: a second limit on the transfers, / s)")

        def record(plan: PointPlan, r: dict) -> None:
            results["points"].append(r)
            partial(results)
            if "error" in r:
                done = f"FAILED: {r['error'][-300:]}"
            else:
                cpu = "?" if r["cpu_busy"] is None else f"{100 * r['cpu_busy']:.0f}%"
                done = (f"step {r['step_ms']:.1f} ms (model {r['model_step_ms']:.1f}, with "
                        f"the host {r['emulated_model_step_ms']:.1f}), E "
                        f"{r['efficiency']:.2f}, CPU {cpu}")
            progress(f"bench scale {len(results['points'])}/{len(grid)} "
                     f"[{time.monotonic() - t0:.0f} s] {point_label(plan.point)}, "
                     f"s={plan.time_scale:g} ({emulated.rate}): {done}")

        for group in job_groups(plans):
            rate = link_rate(group[0].point.link_gbit, group[0].time_scale)
            if rate != emulated.rate:
                emulated.reshape(rate)
            todo: list[PointPlan] = group
            while todo:  # a job that fails in a point leaves the rest to a new one
                interrupt.check()
                ran = run_points(config, overrides, todo, compute_ms=compute_ms,
                                 mpiexec_args=mpiexec_args, host_bytes_per_s=host,
                                 point_timeout=point_timeout, interrupt=interrupt,
                                 done=record)
                todo = todo[len(ran):]
    return results
