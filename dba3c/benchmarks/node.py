"""``dba3c bench node [--quick]``: how close one node gets to its ceilings, and what the
distributed machinery costs, measured on this machine in one go.

Writes ``bench/results.json`` and prints a Markdown page (with ``--log`` also a new log
entry under ``docs/log``, :func:`dba3c.benchmarks.record.record`):

1. emulator ceiling: AtariVectorEnv steps/s alone (configured envs, batch, threads);
2. compute ceilings: prediction states/s and training samples/s of the model alone, and the
   data points/s they allow together on the same cores;
3. end-to-end single-process data points/s (``dba3c train CONFIG``);
4. node efficiency against two ceilings: the lower of the emulator and compute data point
   rates (each alone on all cores), and the combined ceiling (both sharing the cores
   perfectly, :func:`combined_ceiling`);
5. MFU = (3) x FLOPs per data point / the matmul FLOP/s measured in the same run, in the
   precision the network computes in (``model.precision``: a bfloat16 network against
   TensorFlow's bfloat16 matmul, measured like float32's);
6. distributed overhead: 1 worker + 1 PS against (3), and W = 2, 4 on this host (full run);
plus peak RSS per rank and the bytes each worker sends and receives per step.

``dba3c bench profile`` instead trains in this process and reports where one worker's
actor and trainer threads spend each step (``bench/profile.json`` and a Markdown page);
``dba3c bench long`` measures memory and disk over one long run (``bench/long.json``).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dba3c.benchmarks.record import command_line, record
from dba3c.config import Config
from dba3c.cpus import machine_description, this_cpu_precision
from dba3c.distributed.wire import GradMsg, framed_size
from dba3c.launchers.peak_rss import RssSampler
from dba3c.launchers.trial import run_training
from dba3c.learning.params import shard_bounds
from dba3c.preset import load_config
from dba3c.training.profiling import WorkerLaps, section_table
from dba3c.training.rundir import RunDir

if TYPE_CHECKING:  # imported where needed, like the other dba3c modules of a measurement
    from dba3c.learning.models import NetSpec


def combined_rate(predict_states_per_s: float, train_samples_per_s: float, t_max: int) -> float:
    """Data points/s when prediction and training share the same cores one after another.

    Each data point is predicted once when acted on, plus one bootstrap state per rollout of
    ``t_max`` steps, and trained on once:
        1 / rate = (1 + 1/t_max) / predict_states_per_s + 1 / train_samples_per_s
    """
    return 1.0 / ((1.0 + 1.0 / t_max) / predict_states_per_s + 1.0 / train_samples_per_s)


def combined_ceiling(emulator_per_s: float, compute_per_s: float) -> float:
    """Data points/s of a node whose emulation and network computation share its cores
    perfectly (no core idle, no cost of switching).

    Each rate is measured alone on all C cores, so one data point costs C / emulator_per_s
    core-seconds of emulation (one env step per data point) and C / compute_per_s of
    prediction and training; C cores then make
        C / (C / emulator_per_s + C / compute_per_s) = 1 / (1 / emulator_per_s + 1 / compute_per_s)
    data points/s, below the lower of the two rates (which assumes the other is free).
    """
    return 1.0 / (1.0 / emulator_per_s + 1.0 / compute_per_s)


def sandwiched_overheads(singles: list[float], dists: list[float]) -> list[float]:
    """The overhead of each distributed run against the single-process runs around it.

    Runs alternate s_0 d_0 s_1 d_1 ... d_{K-1} s_K (data points/s), and
        overhead_i = 1 - d_i / ((s_i + s_{i+1}) / 2),
    so a machine whose speed drifts over minutes (a shared host) does not pass the drift
    off as overhead. singles: [K + 1]; dists: [K]; returns [K].
    """
    if len(singles) != len(dists) + 1:
        raise ValueError(f"{len(singles)} single-process runs cannot surround "
                         f"{len(dists)} distributed runs")
    return [1.0 - d / ((s0 + s1) / 2) for d, s0, s1 in zip(dists, singles, singles[1:])]


def bytes_per_step(num_params: int, num_ps: int, wire: str = "float32") -> dict:
    """Bytes one worker sends (its gradient, one shard per PS, in ``dist.wire_dtype``
    ``wire``) and receives (the new parameters, one float32 shard per PS) per synchronous
    step, headers included."""
    shards = [hi - lo for lo, hi in shard_bounds(num_params, num_ps)]
    return {"sent": 4 * sum(GradMsg.size(n, wire) for n in shards),  # float32 slots
            "received": 4 * sum(framed_size(n) for n in shards)}


def _timed(fn: Callable[[], object], seconds: float, warmup: int = 3) -> tuple[int, float]:
    """Call ``fn`` ``warmup`` times, then repeatedly for about ``seconds``; (calls, time)."""
    for _ in range(warmup):
        fn()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return calls, time.perf_counter() - start


def emulator_ceiling(cfg: Config, seconds: float) -> dict:
    """AtariVectorEnv steps/s with random actions and no learner."""
    from dba3c.games.envs import make_env_pool

    pool = make_env_pool(cfg.env, cfg.model)
    rng = np.random.default_rng(0)
    step = pool.reset(seed=0)

    def one() -> None:
        nonlocal step
        pool.send(rng.integers(pool.num_actions, size=len(step.env_ids)))
        step = pool.recv()

    states = pool.batch_size
    calls, elapsed = _timed(one, seconds)
    pool.close()
    rate = calls * states / elapsed
    return {"env_steps_per_s": rate, "frames_per_s": rate * pool.frames_per_step}


def compute_ceilings(cfg: Config, spec: NetSpec, seconds: float) -> dict:
    """Prediction states/s (batches of ``env.batch_size``) and training samples/s (batches
    of ``train.batch_size``) of the network alone, on random data."""
    from dba3c.learning.learner import Learner

    learner = Learner(spec, cfg.train, spec.init_params(0),
                      precision=this_cpu_precision(cfg.model.precision).dtype)
    rng = np.random.default_rng(0)
    dtype = np.float32 if spec.kind == "mlp" else np.uint8
    obs_p = rng.integers(0, 255, size=(cfg.env.batch_size, *spec.obs_shape)).astype(dtype)
    b = cfg.train.batch_size
    obs_t = rng.integers(0, 255, size=(b, *spec.obs_shape)).astype(dtype)
    a = rng.integers(spec.num_actions, size=b)
    R = rng.standard_normal(b).astype(np.float32)
    calls, elapsed = _timed(lambda: learner.predict(obs_p), seconds / 2)
    predict_rate = calls * cfg.env.batch_size / elapsed
    calls, elapsed = _timed(lambda: learner.gradient(obs_t, a, R), seconds / 2)
    train_rate = calls * b / elapsed
    return {"predict_states_per_s": predict_rate, "train_samples_per_s": train_rate,
            "data_points_per_s": combined_rate(predict_rate, train_rate, cfg.train.t_max)}


def matmul_peak(seconds: float, dtype: str = "float32", n: int = 2048) -> float:
    """FLOP/s of TensorFlow's n x n matmul in ``dtype`` (float32 or bfloat16) on all cores
    (2 n^3 per product)."""
    import tensorflow as tf

    x = tf.cast(tf.random.normal([n, n]), dtype)
    calls, elapsed = _timed(lambda: tf.linalg.matmul(x, x).numpy(), seconds)
    return 2.0 * n ** 3 * calls / elapsed


def profile_worker(config: str, overrides: list[str], window_s: float,
                   warmup_s: float = 10.0) -> dict:
    """Train one process (``dba3c train``, evaluation and checkpoints off) and time each
    section of the actor's and the trainer's loops over ``window_s`` seconds, from
    ``warmup_s`` after the first trainer step: ms per loop iteration and share of wall time,
    per thread. The run then ends as on SIGTERM."""
    from dba3c.distributed.single import train_single

    laps = WorkerLaps()
    marks: list[tuple[float, float, dict, dict]] = []  # wall, CPU time, actor, trainer
    finished = threading.Event()

    def mark_window() -> None:
        while not laps.trainer.calls.get("gradient") and not finished.wait(0.1):
            continue
        for wait in (warmup_s, window_s):
            if finished.wait(wait):
                return
            marks.append((time.perf_counter(), time.process_time(), laps.actor.snapshot(),
                          laps.trainer.snapshot()))
        os.kill(os.getpid(), signal.SIGTERM)  # the chief's handler ends the run

    marker = threading.Thread(target=mark_window, daemon=True)
    with tempfile.TemporaryDirectory(prefix="dba3c-profile-") as run_dir:
        cfg = load_config(config, [*overrides, f"run.dir={run_dir}", "train.max_steps=0",
                                   f"train.max_seconds={warmup_s + window_s + 600}",
                                   "eval.every=0", "run.progress=none",
                                   "run.checkpoint_every=0"])
        marker.start()
        try:
            train_single(cfg, laps)
        finally:
            finished.set()
            marker.join()
    if len(marks) < 2:
        raise RuntimeError(f"training ended before the profile window closed "
                           f"({warmup_s:g} + {window_s:g} s after the first step)")
    (t0, cpu0, actor0, trainer0), (t1, cpu1, actor1, trainer1) = marks
    wall = t1 - t0
    steps = trainer1.get("gradient", (0.0, 0))[1] - trainer0.get("gradient", (0.0, 0))[1]
    iterations = actor1.get("predict", (0.0, 0))[1] - actor0.get("predict", (0.0, 0))[1]
    return {"config": config, "overrides": list(overrides), "date": date.today().isoformat(),
            "machine": machine_description(), "window_s": wall, "warmup_s": warmup_s,
            "load_average": os.getloadavg(), "trainer_steps": steps,
            "actor_iterations": iterations,
            "data_points_per_s": steps * cfg.train.batch_size / wall,
            # on a shared machine the CPU this process got is the steadier figure
            "cores_used": (cpu1 - cpu0) / wall,
            "data_points_per_cpu_s": steps * cfg.train.batch_size / (cpu1 - cpu0),
            "states_per_actor_iteration": cfg.env.batch_size,
            "actor": section_table(actor0, actor1, wall, "predict"),
            "trainer": section_table(trainer0, trainer1, wall, "gradient")}


def profile_table(r: dict, command: str) -> str:
    """A profile's sections as a dated Markdown page."""
    rows = [f"| {thread} | {name} | {ms:.3f} | {share:.3f} |"
            for thread in ("actor", "trainer") for name, ms, share in r[thread]]
    load = ", ".join(f"{x:.1f}" for x in r["load_average"])
    return "\n".join([
        f"# `dba3c bench profile` on {r['date']}", "",
        f"Command: `{command}`  ", f"Machine: {r['machine']}; config `{r['config']}` "
        f"{' '.join(r['overrides'])}; load average at the end {load}", "",
        f"{r['data_points_per_s']:.0f} data points/s over {r['window_s']:.0f} s after "
        f"{r['warmup_s']:.0f} s of warm-up ({r['data_points_per_cpu_s']:.0f} per CPU-second;"
        f" the process used {r['cores_used']:.2f} cores): {r['trainer_steps']} trainer steps, "
        f"{r['actor_iterations']} actor iterations of {r['states_per_actor_iteration']} "
        f"states. ms per iteration of that thread's loop (actor: per predict call; trainer: "
        f"per step); share: of the window's wall time.", "",
        "| thread | section | ms per iteration | share |", "|---|---|---|---|", *rows, ""]
    ) + "\n"


def _dir_bytes(run_dir: Path) -> dict[str, int]:
    """Bytes of a run directory: ``checkpoints`` (bounded by run.keep_checkpoints) and
    ``logs`` (everything else: metrics, evaluations, TensorBoard events)."""
    sizes = {"checkpoints": 0, "logs": 0}
    checkpoints = RunDir(run_dir).checkpoints_dir
    for p in run_dir.rglob("*"):
        if p.is_file():
            sizes["checkpoints" if p.is_relative_to(checkpoints) else "logs"] += \
                p.stat().st_size
    return sizes


def growth_rate(samples: list[tuple[int, int]]) -> float:
    """Least-squares slope of (step, bytes) samples, in bytes per 1000 steps."""
    steps = np.array([s for s, _ in samples], np.float64)
    sizes = np.array([b for _, b in samples], np.float64)
    return float(np.polyfit(steps, sizes, 1)[0] * 1000) if len(samples) > 1 else 0.0


def long_run(config: str, overrides: list[str], seconds: float, run_dir: Path, *,
             workers: int = 1, warmup_s: float = 300.0, interval_s: float = 10.0) -> dict:
    """A long ``dba3c launch`` run kept in ``run_dir`` (evaluations included): peak RSS per
    rank after ``warmup_s`` and at the end, and how the run directory grows per 1000 steps."""
    cmd = [sys.executable, "-m", "dba3c", "launch", config, *overrides, f"run.dir={run_dir}",
           f"train.max_seconds={seconds}", "train.max_steps=0", "run.progress=none",
           "--workers", str(workers)]
    log = open(run_dir.parent / f"{run_dir.name}.log", "w", encoding="utf-8")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    sampler = RssSampler(proc.pid, interval_s)
    sampler.start()
    start, disk = time.monotonic(), []
    while proc.poll() is None:
        time.sleep(interval_s)
        if run_dir.is_dir():
            disk.append((time.monotonic() - start, RunDir(run_dir).last_step(),
                         _dir_bytes(run_dir)))
    sampler.stop()
    log.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}; see {log.name}")
    warm = next((peak for t, peak in sampler.series if t >= warmup_s), sampler.series[-1][1])
    final = sampler.series[-1][1]
    after = [(step, b["logs"]) for t, step, b in disk if t >= warmup_s]
    return {"seconds": seconds, "workers": workers,
            "ps": load_config(config, overrides).dist.ps, "warmup_s": warmup_s,
            "final_step": RunDir(run_dir).last_step(), "peak_rss_mb_after_warmup": warm,
            "peak_rss_mb_final": final,
            "rss_growth": {k: final[k] / warm[k] - 1.0 for k in final if k in warm},
            "checkpoint_bytes": disk[-1][2]["checkpoints"] if disk else 0,
            "log_bytes_per_1000_steps": growth_rate(after)}


def long_table(r: dict, command: str) -> str:
    """A long run's memory and disk figures as a dated Markdown page."""
    rows = [f"| {k} | {r['peak_rss_mb_after_warmup'][k]:.0f} | {v:.0f} | "
            f"{100 * r['rss_growth'][k]:+.1f}% |"
            for k, v in r["peak_rss_mb_final"].items() if k in r["rss_growth"]]
    return "\n".join([
        f"# Long run: memory and disk ({date.today().isoformat()})", "",
        f"Command: `{command}` ({r['workers']} worker + {r['ps']} PS, {r['final_step']:,} steps "
        f"in {r['seconds']:.0f} s)", "",
        f"| rank | peak RSS after {r['warmup_s']:.0f} s warm-up, MB | peak RSS at the end, MB"
        f" | growth |", "|---|---|---|---|", *rows, "",
        f"Run directory: checkpoints hold {r['checkpoint_bytes'] / 2**20:.1f} MiB at the end "
        f"(bounded by `run.keep_checkpoints`); everything else (metrics, evaluations, "
        f"TensorBoard) grows by {r['log_bytes_per_1000_steps'] / 1024:.0f} KiB per 1000 "
        f"steps.", ""]) + "\n"


def read_node_rate(path: Path) -> float:
    """One node's data points/s from a ``dba3c bench node`` results file: its one process's
    steady rate end to end (``single.data_points_per_s``), what the predicted Figure 8 takes
    as a node's rate. Raises ValueError naming the file when it holds no such rate."""
    try:
        rate = json.loads(path.read_text())["single"]["data_points_per_s"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not the results of `dba3c bench node` "
                         f"({type(e).__name__}: {e})") from None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) \
            or not 0 < rate < math.inf:  # JSON may hold Infinity and NaN
        raise ValueError(f"{path}: single.data_points_per_s is {rate!r}, not a finite rate "
                         f"above 0")
    return float(rate)


def run_bench(config: str, overrides: list[str], quick: bool,
              progress: Callable[[str], None] = lambda text: print(text, file=sys.stderr,
                                                                   flush=True)) -> dict:
    """Every measurement; the results as one JSON-able dict."""
    from dba3c.games.envs import env_spaces
    from dba3c.learning.learner import onednn_enabled
    from dba3c.learning.models import make_net_spec

    cfg = load_config(config, overrides)
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    layout = spec.layout()
    kernels = "TensorFlow oneDNN" if onednn_enabled() else "TensorFlow's own (no oneDNN)"
    train_s, dist_s, pairs = (30, 30, 1) if quick else (120, 60, 3)
    results: dict = {"config": config, "overrides": list(overrides), "quick": quick,
                     "date": date.today().isoformat(), "machine": machine_description(),
                     "cpu_kernels": kernels, "parameters": layout.num_params,
                     "precision": this_cpu_precision(cfg.model.precision).dtype,
                     "flops_per_data_point": spec.flops_per_data_point(),
                     "bytes_per_step_per_worker": bytes_per_step(
                         layout.num_params, cfg.dist.ps, cfg.dist.wire_dtype),
                     "distributed": {}}
    progress("bench 1/6: emulator ceiling")
    results["emulator"] = emulator_ceiling(cfg, 5 if quick else 15)
    progress("bench 2/6: compute ceilings (prediction, training)")
    results["compute"] = compute_ceilings(cfg, spec, 10 if quick else 30)
    progress(f"bench 3/6: matmul peak in {results['precision']}")
    results["matmul_flops_per_s"] = matmul_peak(3 if quick else 10, results["precision"])
    progress(f"bench 4/6: end-to-end single process, {train_s} s")
    single = run_training(config, overrides, 0, train_s)
    results["single"] = single
    emulator, compute = (results["emulator"]["env_steps_per_s"],
                         results["compute"]["data_points_per_s"])
    results["combined_ceiling"] = combined_ceiling(emulator, compute)
    results["node_efficiency"] = single["data_points_per_s"] / min(emulator, compute)
    results["node_efficiency_combined"] = (single["data_points_per_s"]
                                           / results["combined_ceiling"])
    results["mfu"] = (single["data_points_per_s"] * spec.flops_per_data_point()
                      / results["matmul_flops_per_s"])
    singles, runs = [single["data_points_per_s"]], []
    for i in range(pairs):
        progress(f"bench 5/6: 1 worker + {cfg.dist.ps} PS, then one process again, "
                 f"{dist_s} s each ({i + 1}/{pairs})")
        runs.append(run_training(config, overrides, 1, dist_s))
        singles.append(run_training(config, overrides, 0, dist_s)["data_points_per_s"])
    dists = [run["data_points_per_s"] for run in runs]
    overheads = sandwiched_overheads(singles, dists)
    # the first run's time fractions and memory, the median rate
    results["distributed"]["1"] = {**runs[0], "data_points_per_s": float(np.median(dists))}
    results["overhead_runs"] = {"single": singles, "distributed": dists,
                                "overheads": overheads}
    results["distributed_overhead"] = float(np.median(overheads))
    if not quick:
        for workers in (2, 4):
            progress(f"bench 6/6: {workers} workers + {cfg.dist.ps} PS, {dist_s} s")
            results["distributed"][str(workers)] = run_training(config, overrides, workers,
                                                                dist_s)
    return results


def markdown_table(r: dict, command: str) -> str:
    """The results as a dated Markdown page."""
    single, dist = r["single"], r["distributed"]
    rss = ", ".join(f"{k} {v:.0f}" for k, v in single["peak_rss_mb"].items())
    dist_rss = ", ".join(f"{k} {v:.0f}" for k, v in dist["1"]["peak_rss_mb"].items())
    lines = [
        f"# `dba3c bench node{' --quick' if r['quick'] else ''}` on {r['date']}", "",
        f"Command: `{command}`  ", f"Machine: {r['machine']}; "
        f"{r['cpu_kernels']} CPU kernels; config `{r['config']}` "
        f"{' '.join(r['overrides'])} ({r['parameters']:,} parameters, "
        f"{r['flops_per_data_point'] / 1e6:.0f} MFLOP per data point)", "",
        "| measure | value |", "|---|---|",
        f"| 1. emulator ceiling | {r['emulator']['env_steps_per_s']:.0f} env steps/s "
        f"({r['emulator']['frames_per_s']:.0f} frames/s) |",
        f"| 2. compute ceiling | predict {r['compute']['predict_states_per_s']:.0f} states/s,"
        f" train {r['compute']['train_samples_per_s']:.0f} samples/s -> "
        f"{r['compute']['data_points_per_s']:.0f} data points/s together |",
        f"| 2. combined ceiling (emulation and network share the cores) | "
        f"{r['combined_ceiling']:.0f} data points/s |",
        f"| 3. end-to-end, one process | {single['data_points_per_s']:.0f} data points/s |",
        f"| 4. node efficiency against the lower ceiling (the other one free) | "
        f"{r['node_efficiency']:.2f} |",
        f"| 4. node efficiency against the combined ceiling | "
        f"{r['node_efficiency_combined']:.2f} |",
        f"| 5. MFU ({r['precision']} matmul peak {r['matmul_flops_per_s'] / 1e9:.0f} "
        f"GFLOP/s) | "
        f"{r['mfu']:.2f} |",
        f"| 6. 1 worker + 1 PS | {dist['1']['data_points_per_s']:.0f} data points/s "
        f"(overhead {100 * r['distributed_overhead']:.0f}%{_spread(r)}) |"]
    lines += [f"| 6. {w} workers + 1 PS, one host | {dist[w]['data_points_per_s']:.0f} data "
              f"points/s |" for w in sorted(dist, key=int) if w != "1"]
    b = r["bytes_per_step_per_worker"]
    lines += [f"| peak RSS, MB | one process: {rss}; 1 worker + 1 PS: {dist_rss} |",
              f"| bytes per step per worker | sent {b['sent']:,}, received "
              f"{b['received']:,} |", ""]
    return "\n".join(lines) + "\n"


def _spread(r: dict) -> str:
    """How the overhead was found: the runs behind the median, when there were several."""
    overheads = r.get("overhead_runs", {}).get("overheads", [])
    if len(overheads) < 2:
        return ", one pair of runs"
    each = ", ".join(f"{100 * o:.0f}%" for o in overheads)
    return f", median of {len(overheads)} runs each between two single-process runs: {each}"


def bench_command(config: str, overrides: list[str], quick: bool, out_json: Path,
                  log_dir: Path | None = None) -> tuple[str, Path | None]:
    """Run the benchmarks, write the JSON and, with ``log_dir``, the Markdown page as a new
    log entry there (:func:`~dba3c.benchmarks.record.record`); return the page and the
    entry's path (None without ``log_dir``)."""
    results = run_bench(config, overrides, quick)
    table = markdown_table(results, command_line(" node" + (" --quick" if quick else ""),
                                                 config, overrides))
    return table, record(results, table, out_json, "node", log_dir)


def profile_command(config: str, overrides: list[str], quick: bool, out_json: Path,
                    log_dir: Path | None = None) -> tuple[str, Path | None]:
    """``dba3c bench profile``: time the sections of one worker's step, write the JSON and,
    with ``log_dir``, the Markdown page as a new log entry; return the page and the entry's
    path."""
    result = profile_worker(config, overrides, 15 if quick else 40)
    table = profile_table(result, command_line(" profile" + (" --quick" if quick else ""),
                                               config, overrides))
    return table, record(result, table, out_json, "profile", log_dir)


def long_command(config: str, overrides: list[str], seconds: float, run_dir: Path,
                 out_json: Path, log_dir: Path | None = None) -> tuple[str, Path | None]:
    """``dba3c bench long``: the long run (into the new ``run_dir``), its JSON and, with
    ``log_dir``, its Markdown page as a new log entry; return the page and the entry's
    path."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    result = long_run(config, overrides, seconds, run_dir)
    options = f" long --seconds {seconds:g} --run-dir {run_dir}"
    table = long_table(result, command_line(options, config, overrides))
    return table, record(result, table, out_json, "long", log_dir)
