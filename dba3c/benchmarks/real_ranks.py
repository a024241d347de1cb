"""Real TensorFlow ranks on one multi-core machine: what the collective mode's overlap costs
a rank that trains, with overlap off, on, or chosen by the run, on the same layout.

    dba3c bench real-ranks --ranks 4 --cores 4 --repeats 2
    dba3c bench real-ranks --modes off,auto --tcp      # the run's own choice
    dba3c bench real-ranks --ranks 2 --cores 1 --steps 12 --repeats 1  # 2 cores
    dba3c bench real-ranks --ranks 4 --cores 4 --namespaces 10gbit  # a link each

Each run is ``dba3c train`` under the MPI library's ``mpiexec``: ``--ranks`` training
workers of the paper network (the preset's simulators, mini-batch and FC size) in the
collective mode (no parameter server, no evaluator, no checkpoints), each rank bound to
``--cores`` CPUs of its own (hydra's ``-bind-to core:N``; a rank sizes its pools from them).
Modes (``--modes``): ``off`` serial steps, ``on`` overlapped from the first step, ``auto``
the run's own choice after its probe (``dist.overlap_probe_steps``; each rank's line saying
which is kept in the results). With ``--tcp`` the ranks talk TCP over the loopback, as
between nodes; ``--link RATE`` (root, ``tc``) also shapes it at RATE x ranks, the same total
capacity as a link per rank (not per-pair fairness). ``--namespaces RATE`` (root, ``ip
netns``) puts each rank on an emulated node of its own (:mod:`dba3c.benchmarks.emulated`: a
network namespace whose link is shaped at RATE both ways), so every rank has its own link
as on a cluster; hydra would bind every node's one rank to the same first cores, so each
rank is started under ``taskset`` on cores of its own instead (rank r: cores r x C to
r x C + C - 1). Without any of these MPICH moves the bytes
through shared memory, so there is nothing to hide and the difference between the modes is
the overlap's own cost. The runs alternate (off, on, off, on, ...), so drift of the machine
falls on every mode alike.

Figures per run: the seconds per step after the first half of its steps (the first half
holds TensorFlow's tracing, the simulators' start and an auto run's probe), as the scale
bench reads them (:func:`~dba3c.benchmarks.scale.cluster.steady_step_seconds`), the data
points per second over the second half of its metrics lines
(:func:`~dba3c.training.metrics.steady_throughput`), and the CPU seconds every rank used per
step (the children's rusage of the
whole job divided by its steps: start-up included, so compare the modes, not the
absolutes). The overhead of a mode is (mode - off) / off of the medians of the per-run
medians. Results go to ``--out`` (JSON) with the machine and the command line.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dba3c.benchmarks.emulated import EmulatedCluster
from dba3c.benchmarks.record import write_results
from dba3c.benchmarks.scale.cluster import steady_step_seconds
from dba3c.cpus import machine_description
from dba3c.errors import UserError
from dba3c.launchers.local import (
    find_mpiexec,
    launch_command,
    launch_environment,
    launch_layout,
    rank_program,
)
from dba3c.training.metrics import steady_throughput
from dba3c.training.rundir import RunDir


def overhead(on_s: list[float], off_s: list[float]) -> float:
    """The overlap's relative cost: ``(median(on) - median(off)) / median(off)``."""
    off = statistics.median(off_s)
    return (statistics.median(on_s) - off) / off


MODES = {"off": ["dist.collective_overlap=false"],
         "on": ["dist.collective_overlap=true", "dist.overlap_probe_steps=0"],
         "auto": ["dist.collective_overlap=true"]}


def overrides(ranks: int, steps: int, mode: str, run_dir: Path) -> list[str]:
    """The config of one run: the preset's node, ``ranks`` collective workers overlapping as
    ``mode`` says (:data:`MODES`), nothing but training."""
    return [f"dist.workers={ranks}", "dist.ps=0", "dist.aggregation=collective",
            *MODES[mode], "eval.rank=false",
            "eval.every=0", "eval.stop_at_target=false", f"train.max_steps={steps}",
            "train.max_seconds=0", "run.log_every=1", "run.checkpoint_every=0",
            "run.progress=none", f"run.dir={run_dir}"]


# a rank's first line (dba3c.cpus.rank_line), found anywhere in the job's stderr: mpiexec
# forwards the ranks' output in chunks, which may end a line inside another rank's
FIRST_LINE = re.compile(r"rank \d+ \([^)]*\) on \S+: \d+ of \d+ CPUs bound \([^)]*\); "
                        r"(?:threads: [^;\n]*?\d+ inter-op(?:; computes in \w+ \([^)\n]*\))?"
                        r"|no simulators, no TensorFlow)")


def rank_commands(program: list[str], ranks: int, cores: int) -> list[str]:
    """hydra's MPMD arguments starting rank r of ``program`` under ``taskset`` on cores
    r x ``cores`` .. r x ``cores`` + ``cores`` - 1: ``-n 1 taskset -c LO-HI PROGRAM : ...``."""
    segments = [["-n", "1", "taskset", "-c", f"{r * cores}-{(r + 1) * cores - 1}", *program]
                for r in range(ranks)]
    return [word for i, segment in enumerate(segments)
            for word in ([":"] if i else []) + segment]


def run_job(config: str, config_overrides: list[str], ranks: int, cores: int,
            run_dir: Path, tcp: bool = False, nodes_args: list[str] | None = None,
            evaluator: bool = False) -> tuple[str, list[dict], float, float]:
    """``dba3c train`` of ``ranks`` ranks with ``config_overrides`` (run.dir ``run_dir``,
    made afresh), each bound to ``cores`` CPUs: its stderr, metrics records, CPU seconds
    (every process of the job) and wall seconds. ``nodes_args``: the mpiexec options that
    put rank k on emulated node k + 1 (``--namespaces``). ``evaluator``: also an evaluator
    rank, and no rank bound (a world of one rank would train alone, not collectively; with
    ``eval.every=0`` the evaluator only waits)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    if nodes_args is None:
        cmd = launch_command(config, config_overrides, workers=ranks, ps=0,
                             evaluator=evaluator,
                             mpiexec_args=[] if evaluator else ["-bind-to", f"core:{cores}"])
    else:
        extra, world = launch_layout(config, config_overrides, workers=ranks, ps=0,
                                     evaluator=False)
        cmd = [find_mpiexec(), *nodes_args,
               *rank_commands(rank_program(config, extra), world, cores)]
    env = launch_environment()
    if tcp:  # every pair through the (shaped) loopback, as between nodes
        env.update(MPIR_CVAR_NOLOCAL="1", MPIR_CVAR_CH4_NETMOD="ofi", FI_PROVIDER="tcp")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return proc.stderr, RunDir(run_dir).read_metrics(), cpu, wall


def overlap_choices(stderr: str) -> list[str]:
    """The lines of a job's ``stderr`` in which rank 0 said which step it kept."""
    return [line for line in stderr.splitlines() if ": collective overlap " in line]


def run_once(config: str, ranks: int, cores: int, steps: int, mode: str, run_dir: Path,
             tcp: bool, nodes_args: list[str] | None = None) -> dict:
    """One job (:func:`run_job`) in ``mode``; its figures (see the module docstring)."""
    stderr, metrics, cpu, wall = run_job(config, overrides(ranks, steps, mode, run_dir),
                                         ranks, cores, run_dir, tcp, nodes_args)
    return {"mode": mode, "step_s": steady_step_seconds(metrics, warmup=steps // 2),
            "data_points_per_s": steady_throughput(metrics),
            "cpu_s_per_step": cpu / steps, "wall_s": wall, "steps": len(metrics),
            "first_lines": FIRST_LINE.findall(stderr),
            "overlap_choices": overlap_choices(stderr)}


def shape_loopback(rate: str | None) -> None:
    """Rate-limit the loopback with a token bucket at ``rate`` (tc units), or remove it."""
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)
    if rate:
        subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate,
                        "burst", "4mb", "latency", "50ms"], check=True)


def compare_modes(config: str, *, ranks: int, cores: int, steps: int, repeats: int,
                  modes: str, tcp: bool, link: str | None, namespaces: str | None,
                  work_dir: Path, out: Path) -> int:
    """``dba3c bench real-ranks``: the runs of every mode in ``modes`` (comma-separated, off
    among them), alternating, ``repeats`` times; their figures and each mode's overhead
    against off written to ``out``."""
    chosen = modes.split(",")
    if "off" not in chosen or not set(chosen) <= set(MODES):
        raise UserError(f"--modes {modes}: a list of {', '.join(MODES)} that has off")
    if ranks * cores > (os.cpu_count() or 1):
        raise UserError(f"--ranks {ranks} x --cores {cores} needs {ranks * cores} CPUs; this "
                        f"machine has {os.cpu_count()}")
    if namespaces and (tcp or link):
        raise UserError("--namespaces gives each rank a link of its own: no --tcp or --link "
                        "with it")
    with contextlib.ExitStack() as stack:
        nodes_args = None
        if namespaces:
            cluster = stack.enter_context(EmulatedCluster(ranks, namespaces))
            nodes_args = cluster.mpiexec_args()
        if link:
            rate_number = "".join(c for c in link if c.isdigit() or c == ".")
            shape_loopback(f"{float(rate_number) * ranks:g}{link[len(rate_number):]}")
            stack.callback(shape_loopback, None)
        runs = []
        for i in range(repeats):
            for mode in chosen:
                run = run_once(config, ranks, cores, steps, mode, work_dir / f"{i}-{mode}",
                               tcp=tcp or link is not None, nodes_args=nodes_args)
                runs.append(run)
                print(f"real_ranks: run {len(runs)}/{len(chosen) * repeats}: overlap "
                      f"{mode:4} {run['step_s']:.4f} s/step, "
                      f"{run['data_points_per_s']:.0f} data points/s, "
                      f"{run['cpu_s_per_step']:.3f} CPU s/step", file=sys.stderr, flush=True)
                for line in run["overlap_choices"]:
                    print(f"real_ranks:   {line}", file=sys.stderr, flush=True)
    step_s = {mode: [r["step_s"] for r in runs if r["mode"] == mode] for mode in chosen}
    command = (f"dba3c bench real-ranks --config {config} --ranks {ranks} --cores {cores} "
               f"--steps {steps} --repeats {repeats} --modes {modes}"
               + (" --tcp" if tcp else "") + (f" --link {link}" if link else "")
               + (f" --namespaces {namespaces}" if namespaces else ""))
    costs = {mode: overhead(step_s[mode], step_s["off"]) for mode in chosen if mode != "off"}
    results = {"machine": machine_description(), "ranks": ranks, "cores": cores,
               "config": config,
               "link": (f"a namespace per rank, {namespaces} links" if namespaces
                        else link or ("TCP" if tcp else "shared memory")),
               "command": command, "overhead": costs, "runs": runs}
    write_results(results, out)
    for mode, cost in costs.items():
        print(f"real_ranks: overlap {mode} costs {100 * cost:+.1f}% a step "
              f"({statistics.median(step_s[mode]):.4f} s against "
              f"{statistics.median(step_s['off']):.4f} off)", file=sys.stderr)
    print(f"real_ranks: {out}", file=sys.stderr)
    return 0
