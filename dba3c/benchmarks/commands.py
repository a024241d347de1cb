"""``dba3c bench BENCH``: each bench's options and what it runs.

  node        one node's ceilings, end-to-end throughput, MFU and distributed overhead
  precision   float32 against bfloat16 on this node
  profile     where one worker's step goes
  long        memory and disk over one long run
  scale       (root) synthetic-compute runs on the emulated cluster
  real-ranks  real TensorFlow ranks: what the collective mode's overlap costs
  overlap-cost  one real rank: what staging costs a step here, for scale to charge
  waiting     what waiting in a collective costs, polled or blocked
  stages      what a staged gradient costs

node, precision, profile, long and scale write JSON under ``bench/`` and, with ``--log``, a
new log entry (:func:`dba3c.benchmarks.record.record`). ``dba3c`` builds its parser from
this module at every start, so it imports only the standard library; a bench's own module
is imported when the bench runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from dba3c.errors import UserError


def counts(text: str) -> tuple[int, ...]:
    """``--workers 32,64`` / ``--ps 4,8`` (``--links``, ``--hidden``) of ``dba3c bench
    scale``: positive counts."""
    try:
        values = tuple(int(n) for n in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive "
                                         f"counts (e.g. 32,64)")
    return values


def _recorded(sub: argparse._SubParsersAction, name: str, help: str, out: str,
              quick: str | None) -> argparse.ArgumentParser:
    """A bench that writes ``bench/OUT`` and, with ``--log``, a log entry of kind ``name``;
    ``quick``: what ``--quick`` shortens (None: no ``--quick``)."""
    p = sub.add_parser(name, help=help, description=help)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--config", default="configs/breakout.yaml", help="YAML preset")
    if quick:
        p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--out", default=f"bench/{out}", help=f"JSON results (default bench/{out})")
    p.add_argument("--log", action="store_true",
                   help=f"also write the Markdown table as a new log entry, "
                   f"DIR/YYYY-MM-DD-bench-{name}.md (DIR: --log-dir; -2, -3, ... when the "
                   f"name exists); no curated page is edited")
    p.add_argument("--log-dir", default=None, metavar="DIR",
                   help="--log: the log's directory (default docs/log)")
    return p


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """``dba3c bench`` and its benches, in ``dba3c``'s sub-commands ``sub``."""
    bench = sub.add_parser("bench", help="ceilings, end-to-end throughput, MFU, distributed "
                           "overhead, scale, collectives (dba3c bench BENCH --help)",
                           description="Measure; the results go to bench/ (node, profile, "
                           "long, scale; --log: and a new docs/log entry) or stdout.")
    benches = bench.add_subparsers(dest="bench", parser_class=type(bench))
    benches.required = True

    _recorded(benches, "node", "ceilings, end-to-end throughput, MFU, distributed overhead "
              "of this node", "results.json", "shorter runs (under 3 minutes)")

    _recorded(benches, "precision", "float32 against bfloat16 (model.precision), "
              "alternating: the network's ceilings, the matmul peak, one process end to end",
              "precision.json", "one pair of shorter runs (about 3 minutes)")

    _recorded(benches, "profile", "train one process and time each section of the actor's "
              "and the trainer's loops (emulator, predict, sampling, assembly, queue, "
              "gradient, Adam, assign, metrics) over 40 s from 10 s after the first step",
              "profile.json", "a 15 s window")

    p = _recorded(benches, "long", "one long 1 worker + 1 PS run (evaluations on) measuring "
                  "peak RSS per rank over time and run-directory growth", "long.json", None)
    p.add_argument("--seconds", type=float, default=1800.0,
                   help="the run's length (default 1800)")
    p.add_argument("--run-dir", default="runs/bench-long",
                   help="its run directory, new (default runs/bench-long)")

    p = _recorded(benches, "scale", "(root) synthetic-compute runs on the emulated cluster "
                  "over a grid of workers, parameter servers, FC sizes, backup workers and "
                  "link rates", "scale.json", "a smaller grid")
    p.add_argument("--compute-ms", type=float, default=None,
                   help="a worker's compute time per step T_c (default: an assumed "
                   "12-core node)")
    p.add_argument("--time-scale", type=float, default=10.0,
                   help="s, workers wait T_c x s per step and 10 Gb/s links run at 10/s Gb/s "
                   "(100 Gb/s links at 5 x s; default 10)")
    p.add_argument("--aggregation", choices=("ps", "collective"), default="ps",
                   help="ps (the default grid: workers x parameter servers) or collective "
                   "(workers without parameter servers, dist.aggregation)")
    p.add_argument("--workers", type=counts, default=(), metavar="W[,W...]",
                   help="only the grid's points with these worker counts (e.g. 32,64)")
    p.add_argument("--ps", type=counts, default=(), metavar="P[,P...]",
                   help="only the grid's points with these parameter-server counts")
    p.add_argument("--links", type=counts, default=(), metavar="GBIT[,GBIT...]",
                   help="only the grid's points over links of these rates, Gb/s (10, 100)")
    p.add_argument("--hidden", type=counts, default=(), metavar="H[,H...]",
                   help="only the grid's points with these FC sizes (model.hidden)")
    p.add_argument("--point-timeout", type=float, default=None, metavar="SECONDS",
                   help="end a point still running after this long and record it as failed "
                   "(default 300)")
    p.add_argument("--wire-dtype", choices=("float32", "bfloat16"), default=None,
                   help="the type on the wire at every point, as dist.wire_dtype "
                   "(bfloat16: half the bytes of the gradients and of a collective's "
                   "parameter changes; a parameter server's parameters stay float32; "
                   "default: the config's, float32)")

    p = benches.add_parser("real-ranks", help="real TensorFlow ranks on this machine: what "
                           "the collective mode's overlap costs a step, off, on or auto",
                           description="Real TensorFlow ranks on this machine: what the "
                           "collective mode's overlap costs a step (dba3c.benchmarks."
                           "real_ranks); results as JSON in --out.")
    p.add_argument("--config", default="configs/breakout_64.yaml")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--cores", type=int, default=4, help="CPUs bound to each rank")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeats", type=int, default=2, help="runs of each mode")
    p.add_argument("--modes", default="off,on", help="of off, on, auto (off is the base)")
    p.add_argument("--tcp", action="store_true", help="TCP over the loopback")
    p.add_argument("--link", default=None, help="e.g. 10gbit: TCP over a shaped loopback")
    p.add_argument("--namespaces", default=None, metavar="RATE",
                   help="e.g. 10gbit: each rank on an emulated node of its own, its link "
                   "shaped at RATE (root)")
    p.add_argument("--work-dir", default="runs/real_ranks")
    p.add_argument("--out", default="bench/real_ranks.json")

    p = benches.add_parser("overlap-cost", help="what the overlapped collective step costs "
                           "one real rank on this machine, for dba3c bench scale to charge",
                           description="One real rank on all of this machine's cores, "
                           "serial and overlapped steps alternating in one run: what staging "
                           "costs a step (dba3c.benchmarks.overlap_cost); written to --out, "
                           "where dba3c bench scale reads it.")
    p.add_argument("--config", default="configs/breakout_64.yaml")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--probe-steps", type=int, default=10,
                   help="steps of each mode in a probe (default 10)")
    p.add_argument("--work-dir", default="runs/overlap_cost")
    p.add_argument("--out", default="bench/overlap_cost.json")

    p = benches.add_parser("waiting", help="what waiting in a collective costs, polled or "
                           "blocked: step time and a waiting rank's CPU",
                           description="What waiting in a collective costs, polled or blocked "
                           "(dba3c.benchmarks.waiting); a Markdown table on stdout.")
    p.add_argument("--ranks", type=counts, default="2,4,8", metavar="W[,W...]",
                   help="numbers of ranks (default 2,4,8)")
    p.add_argument("--strategies", default=None,
                   help="comma-separated poll-<N>us (sleeps of at most N us), quick-<N>us (a "
                   "collective client's waits) or block (default: poll-500us, poll-50us, "
                   "poll-20us, poll-10us, quick-50us, block)")
    p.add_argument("--params", type=int, default=None,
                   help="float32 per vector (default: the paper network's 332,295)")
    p.add_argument("--rounds", type=int, default=50, help="collectives per measurement")
    p.add_argument("--late-ms", type=float, default=20.0, help="rank 0's delay per round")
    p.add_argument("--timer-slack-ns", type=int, default=None,
                   help="the ranks' timer slack (default: a dba3c rank's; Linux's: 50000)")
    p.add_argument("--algorithm", default="mpi",
                   help="the collectives' rounds, as dist.collective_algorithm (default mpi)")
    p.add_argument("--link-mbit", type=float, default=0.0,
                   help="the emulated links' rate, Mbit/s: each point's link share")
    p.add_argument("--rank-of-point", help=argparse.SUPPRESS)  # one rank under mpiexec

    p = benches.add_parser("stages", help="what a staged gradient costs, stage by stage",
                           description="What a staged gradient costs against one gradient "
                           "call, and each stage's share of the step (dba3c.benchmarks."
                           "stages); a Markdown table on stdout.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--config", required=True, help="a YAML preset")
    p.add_argument("--calls", type=int, default=20, help="timed calls of each kind")
    # bare `dba3c bench` names the benches in its one-line error
    benches.metavar = "{" + ",".join(benches.choices) + "}"


def run_bench(args: argparse.Namespace) -> int:
    """Run the bench ``args`` name."""
    return BENCHES[args.bench](args)


def _recorded_bench(measure: Callable[[argparse.Namespace, Path, Path | None],
                                      tuple[str, Path | None]]
                    ) -> Callable[[argparse.Namespace], int]:
    """A bench that writes ``--out`` and, with ``--log``, a log entry: the config checked
    first, then ``measure(args, out_json, log_dir)``; its table printed, then where the
    results went."""
    def run(args: argparse.Namespace) -> int:
        from dba3c.preset import load_config

        load_config(args.config, args.overrides)  # refuse bad input before minutes of work
        if args.log_dir is not None and not args.log:
            raise UserError("--log-dir is a --log option (give --log)")
        log_dir = Path(args.log_dir or "docs/log") if args.log else None
        out_json = Path(args.out)
        table, log = measure(args, out_json, log_dir)
        print(table, end="")
        print(f"bench: results in {out_json}" + (f"; log entry {log}" if log else ""),
              file=sys.stderr)
        return 0

    return run


def _quick_bench(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A recorded bench (:func:`_recorded_bench`) whose measurement is ``module.function(
    config, overrides, quick, out_json, log_dir)``, imported when the bench runs."""
    def measure(args: argparse.Namespace, out_json: Path,
                log_dir: Path | None) -> tuple[str, Path | None]:
        command = getattr(importlib.import_module(module), function)
        return command(args.config, args.overrides, args.quick, out_json, log_dir)

    return _recorded_bench(measure)


_node = _quick_bench("dba3c.benchmarks.node", "bench_command")
_precision = _quick_bench("dba3c.benchmarks.precision", "precision_command")
_profile = _quick_bench("dba3c.benchmarks.node", "profile_command")


@_recorded_bench
def _long(args: argparse.Namespace, out_json: Path,
          log_dir: Path | None) -> tuple[str, Path | None]:
    from dba3c.benchmarks.node import long_command

    run_dir = Path(args.run_dir)
    if args.seconds <= 0:
        raise UserError(f"--seconds {args.seconds:g} must be a positive number of seconds")
    if run_dir.exists():
        raise UserError(f"--run-dir {run_dir} exists; a long run needs a fresh directory "
                        f"(it would resume instead)")
    return long_command(args.config, args.overrides, args.seconds, run_dir, out_json, log_dir)


@_recorded_bench
def _scale(args: argparse.Namespace, out_json: Path,
           log_dir: Path | None) -> tuple[str, Path | None]:
    from dba3c.benchmarks.scale.cluster import POINT_TIMEOUT_S
    from dba3c.benchmarks.scale.grid import Selection
    from dba3c.benchmarks.scale.report import scale_command

    if args.compute_ms is not None and args.compute_ms <= 0:
        raise UserError(f"--compute-ms {args.compute_ms:g} must be a positive number of "
                        f"milliseconds")
    if args.time_scale < 1:
        raise UserError(f"--time-scale {args.time_scale:g} must be at least 1")
    point_timeout = POINT_TIMEOUT_S if args.point_timeout is None else args.point_timeout
    if not point_timeout > 0:
        raise UserError(f"--point-timeout {point_timeout:g} must be a positive number of "
                        f"seconds")
    return scale_command(args.config, args.overrides, args.quick, args.compute_ms,
                         args.time_scale, out_json, log_dir, args.aggregation,
                         Selection(args.workers, args.ps, args.links, args.hidden),
                         point_timeout, args.wire_dtype)


def _real_ranks(args: argparse.Namespace) -> int:
    from dba3c.benchmarks.real_ranks import compare_modes

    return compare_modes(args.config, ranks=args.ranks, cores=args.cores, steps=args.steps,
                         repeats=args.repeats, modes=args.modes, tcp=args.tcp,
                         link=args.link, namespaces=args.namespaces,
                         work_dir=Path(args.work_dir), out=Path(args.out))


def _overlap_cost(args: argparse.Namespace) -> int:
    from dba3c.benchmarks.overlap_cost import measure

    return measure(args.config, args.steps, args.probe_steps, Path(args.work_dir),
                   Path(args.out))


def _waiting(args: argparse.Namespace) -> int:
    from dba3c.benchmarks.waiting import rank_of_point, waiting_command

    if args.rank_of_point:
        return rank_of_point(args.rank_of_point, args.params, args.rounds, args.late_ms,
                             args.timer_slack_ns, args.algorithm)
    return waiting_command(args.ranks, args.strategies, args.params, args.rounds,
                           args.late_ms, args.timer_slack_ns, args.algorithm, args.link_mbit)


def _stages(args: argparse.Namespace) -> int:
    from dba3c.benchmarks.stages import measure, stages_table

    print(stages_table(measure(args.config, args.overrides, args.calls)))
    return 0


BENCHES: dict[str, Callable[[argparse.Namespace], int]] = {
    "node": _node, "precision": _precision, "profile": _profile, "long": _long, "scale": _scale,
    "real-ranks": _real_ranks, "overlap-cost": _overlap_cost, "waiting": _waiting,
    "stages": _stages}
