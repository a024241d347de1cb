"""The ``dba3c`` command line: the same code in one process, under mpiexec/srun, or submitit.

Bad input of any kind ends with one line ``error: ...`` on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dba3c.benchmarks.commands import add_bench_parser, run_bench
from dba3c.errors import OneLineParser, UserError, exit_code
from dba3c.launchers.slurm_site import add_slurm_args
from dba3c.learning.tflog import quiet_tensorflow


def finite_float(text: str) -> float:
    """An option's finite number (``nan`` and ``inf`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_float(text: str) -> float:
    """An option's finite number above 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not above 0")
    return value


def patterns(text: str) -> list[str]:
    """An option's comma-separated, non-empty shell patterns."""
    items = text.split(",")
    if "" in items:
        raise argparse.ArgumentTypeError(f"{text!r} has an empty pattern")
    return items


def rate_or_file(text: str) -> float | Path:
    """An option's rate above 0, or a path where the text is no number (read later)."""
    try:
        float(text)
    except ValueError:
        return Path(text)
    return positive_float(text)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML preset, e.g. configs/breakout.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides with YAML typing, e.g. train.lr=3e-4")
    p.add_argument("--overrides", action="append", default=[], dest="overrides_files",
                   metavar="FILE", help="a YAML file of config sections applied before the "
                   "KEY=VALUE overrides (e.g. the node settings `dba3c tune --write` found)")


def make_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = OneLineParser(prog="dba3c", description="Distributed synchronous BA3C for Atari.")
    sub = parser.add_subparsers(dest="command", parser_class=OneLineParser, metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("train", help="train (one process, or one rank under mpiexec/srun)")
    _add_config_args(p)

    p = sub.add_parser("describe", help="resolved config, parameter count, FLOPs, rank layout")
    _add_config_args(p)
    p.add_argument("--workers", type=int, default=0, help="gradient ranks to lay out")

    sub.add_parser("keys", help="every config key: default and meaning (Markdown)")

    p = sub.add_parser("launch", help="local multi-process dry run under mpiexec")
    _add_config_args(p)
    p.add_argument("--workers", type=int, required=True, help="ranks computing gradients")
    p.add_argument("--ps", type=int, default=None, help="parameter servers (dist.ps)")
    p.add_argument("--evaluator", action="store_true", help="add an evaluator rank")

    p = sub.add_parser("evaluate", help="play games with a checkpoint; optional video")
    p.add_argument("path", help="checkpoint file or run directory (newest checkpoint)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="overrides of the stored config, e.g. eval.max_frames=4000")
    p.add_argument("--episodes", type=int, default=None, help="games (default eval.episodes)")
    p.add_argument("--video", action="append", default=[], metavar="PATH",
                   help="write one game as .mp4 or .gif (repeat for both)")
    p.add_argument("--seed", type=int, default=0, help="seed of the games")

    p = sub.add_parser("units", help="a checkpoint's active units per layer, on frames of "
                       "random play (dead ReLUs pass no gradient)")
    p.add_argument("path", help="checkpoint file or run directory (newest checkpoint)")
    p.add_argument("--frames", type=int, default=800, help="observations (default 800)")
    p.add_argument("--seed", type=int, default=0, help="seed of the games")

    p = sub.add_parser("sweep", help="a grid of runs into one sweep directory with sweep.csv")
    _add_config_args(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=v1,v2",
                   help="a swept key and its values (repeat for a grid)")
    p.add_argument("--launcher", choices=["local", "slurm"], default="local",
                   help="local: one run after another; slurm: a submitit job array")
    p.add_argument("--workers", type=int, default=None,
                   help="gradient ranks per run unless dist.workers is swept (default 1)")
    p.add_argument("--max-seconds", type=float, default=None, help="train.max_seconds per run")
    p.add_argument("--dir", default=None, help="sweep directory (default runs/sweep-CONFIG)")
    add_slurm_args(p, time_help="--launcher slurm: time limit per point, minutes (default: "
                   "its train.max_seconds plus a margin)")

    add_bench_parser(sub)

    p = sub.add_parser("tune", help="measure this node's fastest env.num_envs, env.batch_size "
                       "and TensorFlow threads for one process; print the overrides")
    _add_config_args(p)
    p.add_argument("--seconds", type=float, default=120.0,
                   help="time budget of the whole search (default 120)")
    p.add_argument("--trial-seconds", type=float, default=None,
                   help="training seconds per trial (default: sized to fit the budget)")
    p.add_argument("--write", default=None, metavar="FILE",
                   help="also write the best setting's node keys (env.num_envs, "
                   "env.batch_size, train.intra_op_threads, train.inter_op_threads) to FILE, "
                   "a new overrides file that any preset takes: dba3c train PRESET "
                   "--overrides FILE")
    p.add_argument("--state", default=None, metavar="FILE",
                   help="trials so far, for resuming (default runs/tune/tune-<config stem>.json)")

    p = sub.add_parser("doctor", help="preflight: every rank's CPUs, MPI, PMI, TensorFlow, "
                       "game and disk, and the latency and bandwidth between the ranks "
                       "(alone, under mpiexec/srun, or sbatch slurm/doctor.sh)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--config", default="configs/breakout_64.yaml",
                   help="YAML preset whose game, thread pools and run directory are checked "
                   "(default configs/breakout_64.yaml)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="a rank silent this long ends the job non-zero, named (default 60)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="rank 0 also writes the rows and pairs as JSON")

    sub.add_parser("submit", help="submit to Slurm with submitit (see `dba3c submit --help`)")

    p = sub.add_parser("plot", help="learning curves and scaling figures (PNG + CSV)")
    p.add_argument("paths", nargs="+", help="run or sweep directories, scale results (.json), "
                   "learning curves' tables written by plot (.csv: their runs drawn again)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--score", type=finite_float, help="also the paper's Figure 8, predicted: "
                   "time to this evaluation score against workers (needs --node-rate)")
    p.add_argument("--node-rate", type=rate_or_file, metavar="RATE_OR_JSON",
                   help="one node's data points/s, for --score: a number, or the results "
                   "file of `dba3c bench node` (its one process's rate)")
    p.add_argument("--link", type=positive_float, default=10.0, metavar="GBIT",
                   help="the scale results' link rate whose E(W) --score uses (default 10)")
    p.add_argument("--only", type=patterns, default=[], metavar="PATTERN[,PATTERN...]",
                   help="learning curves of only the runs whose name matches one of these "
                   "shell patterns (a run directory's name, or a recorded run's in a .csv)")

    p = sub.add_parser("table", help="runs of the paper's games beside its Table 3: per game "
                       "and config, across seeds (Markdown + CSV + figure)")
    p.add_argument("paths", nargs="+", metavar="RUN_DIR", help="run directories")
    p.add_argument("--out", required=True, help="output directory")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse; ``KEY=VALUE`` overrides, and the paths of ``plot`` and ``table``, may come
    before or after options."""
    parser = make_parser()
    args, rest = parser.parse_known_args(argv)
    if hasattr(args, "paths"):  # paths on both sides of an option: all of them
        args.paths += [a for a in rest if not a.startswith("-")]
        rest = [a for a in rest if a.startswith("-")]
    unknown = [a for a in rest if a.startswith("-") or "=" not in a or
               not hasattr(args, "overrides")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if rest:
        args.overrides = list(args.overrides) + rest
    if getattr(args, "overrides_files", None):  # a bad file: UserError, under exit_code
        from dba3c.config import overrides_files

        args.overrides = overrides_files(args.overrides_files) + list(args.overrides)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one command; exit codes: 0 ok, 1 training failed, 2 bad input."""
    quiet_tensorflow(os.environ)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["submit"]:  # the submitit launcher has its own options
        from dba3c.launchers.submit import main as submit_main

        return submit_main(argv[1:])

    def run() -> int:
        args = parse_args(argv)
        return COMMANDS[args.command](args) or 0

    return exit_code(run)


def cmd_train(args: argparse.Namespace) -> int:
    """``dba3c train``: world size 1 trains alone, otherwise this rank plays its role."""
    from dba3c.distributed.run import train
    from dba3c.launchers.mpienv import slurm_job_id, world_size_hint

    return train(args.config, args.overrides, world_size_hint(), slurm_job_id())


def cmd_keys(args: argparse.Namespace) -> int:
    """``dba3c keys``: the config key reference, from the schema (docs/config.md shows it)."""
    from dba3c.config import keys_markdown

    print(keys_markdown(), end="")
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    """``dba3c describe``: what a run would be, without running it."""
    from dba3c.config import dump_yaml
    from dba3c.distributed.roles import make_roles, required_world_size
    from dba3c.games.envs import env_spaces
    from dba3c.launchers.slurm_site import MARGIN_MIN, allocation_lines, time_limit_minutes
    from dba3c.learning.models import make_net_spec
    from dba3c.preset import load_config

    cfg = load_config(args.config, args.overrides)
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    print(dump_yaml(cfg), end="")
    print(f"parameters: {spec.layout().num_params}")
    print(f"flops_per_state: {spec.flops_per_state()}")
    print(f"flops_per_data_point: {spec.flops_per_data_point()}")
    workers = args.workers or cfg.dist.workers
    if workers:
        roles = make_roles(required_world_size(cfg, workers), cfg)
        print(f"world_size: {roles.world_size}")
        for line in roles.describe():
            print(line)
        minutes = time_limit_minutes(cfg.train.max_seconds, None)
        for line in allocation_lines(roles.world_size, 1, minutes,
                                     cfg.eval.target_score if cfg.eval.stop_at_target else None):
            print(line)
        print(f"(one rank per node, the time limit dba3c submit asks: train.max_seconds plus "
              f"{MARGIN_MIN} min; slurm/*.sh print their own at start)")
    else:
        print("world_size: 1 (pass --workers W to lay out a cluster)")
    return 0


MAX_SEED = 2**31 - 1  # the largest --seed ale_py 0.12 takes (its reset refuses 2**31)


def _check_seed(seed: int) -> None:
    """A --seed of the games: ale_py's range."""
    if not 0 <= seed <= MAX_SEED:
        raise UserError(f"--seed {seed} must be in [0, {MAX_SEED}]")


def _checkpoint_network(path: str, overrides: list[str], advice: str) -> tuple:
    """A checkpoint file or a run directory's newest checkpoint, its stored config with
    ``overrides``, and the network of that config, refused (with ``advice``) when it is not
    the checkpoint's."""
    from dba3c.games.envs import env_spaces
    from dba3c.learning.models import make_net_spec
    from dba3c.training import checkpoint

    ckpt, cfg = checkpoint.load_for_evaluation(path, overrides)
    spec = make_net_spec(cfg.model, *env_spaces(cfg))
    checkpoint.check_layout(ckpt, cfg, spec.layout(), f"from {path}", advice)
    return ckpt, cfg, spec


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``dba3c evaluate``: the training run's evaluation, offline, from a checkpoint."""
    import json

    from dba3c.config import is_atari
    from dba3c.games.scores import score_stats
    from dba3c.games.video import check_video_path, write_video

    if args.episodes is not None and args.episodes < 1:
        raise UserError(f"--episodes {args.episodes} must be at least 1")
    _check_seed(args.seed)
    for path in args.video:
        check_video_path(path)  # before minutes of play, not after
    ckpt, cfg, spec = _checkpoint_network(args.path, args.overrides,
                                          "evaluate it with its own config")
    if args.video and not is_atari(cfg.env.id):
        raise UserError(f"--video needs an Atari game; env.id={cfg.env.id} has no frames")
    from dba3c.games.evaluation import evaluate_params, record_game  # TensorFlow: after the checks
    episodes = args.episodes or cfg.eval.episodes

    def progress(n: int, score: float) -> None:
        print(f"game {n}/{episodes}: score {score:g}", file=sys.stderr, flush=True)

    scores = evaluate_params(cfg, spec, ckpt.theta, episodes, args.seed, on_game=progress)
    result = {"checkpoint_step": ckpt.step, "greedy": cfg.eval.greedy,
              "protocol": cfg.eval.protocol, **score_stats(cfg.env.id, scores),
              "scores": scores}
    if args.video:
        score, frames = record_game(cfg, spec, ckpt.theta, args.seed)
        result["video"] = {"paths": [str(write_video(p, frames)) for p in args.video],
                           "frames": len(frames), "score": score}
    print(json.dumps(result))
    return 0


def cmd_units(args: argparse.Namespace) -> int:
    """``dba3c units``: how many units of each layer a checkpoint's network still uses."""
    import json

    if args.frames < 1:
        raise UserError(f"--frames {args.frames} must be at least 1")
    _check_seed(args.seed)
    ckpt, cfg, spec = _checkpoint_network(args.path, [], "use its own config")
    from dba3c.games.evaluation import active_unit_counts, random_play_observations

    obs = random_play_observations(cfg, args.frames, args.seed)
    print(json.dumps({"checkpoint_step": ckpt.step, "frames": len(obs),
                      "layers": active_unit_counts(spec, ckpt.theta, obs)}))
    return 0


def cmd_launch(args: argparse.Namespace) -> int:
    """``dba3c launch``: start mpiexec with the right number of ranks."""
    from dba3c.launchers.local import launch_local

    return launch_local(args.config, args.overrides, workers=args.workers, ps=args.ps,
                        evaluator=args.evaluator)


def cmd_plot(args: argparse.Namespace) -> int:
    """``dba3c plot``: PNG and CSV files for run and sweep directories."""
    from dba3c.analysis.plots import Figure8, plot_command
    from dba3c.outputs import check_output_dir

    check_output_dir(args.out, f"--out {args.out}")
    if (args.score is None) != (args.node_rate is None):
        raise UserError("--score and --node-rate go together: the predicted Figure 8 needs "
                        "the score and one node's data points/s")
    rate = args.node_rate
    if isinstance(rate, Path):
        from dba3c.benchmarks.node import read_node_rate

        try:
            rate = read_node_rate(rate)
        except ValueError as e:
            raise UserError(f"--node-rate: {e}") from None
    figure8 = None if args.score is None else Figure8(args.score, rate, args.link)
    try:
        written = plot_command(args.paths, args.out, figure8, args.only)
    except ValueError as e:
        raise UserError(str(e)) from None
    for path in written:
        print(path)
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    """``dba3c table``: print the Markdown table, then the files written."""
    from dba3c.analysis.table import table_command
    from dba3c.outputs import check_output_dir

    check_output_dir(args.out, f"--out {args.out}")
    try:
        text, written = table_command(args.paths, args.out)
    except ValueError as e:
        raise UserError(str(e)) from None
    print(text)
    for path in written:
        print(path)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """``dba3c sweep``: run the grid, write SWEEP/sweep.csv, print its path."""
    from dba3c.launchers.slurm_site import site_from_args
    from dba3c.launchers.sweep import SlurmRequest, run_sweep

    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers {args.workers} must be at least 1")
    if args.max_seconds is not None and args.max_seconds <= 0:
        raise UserError(f"--max-seconds {args.max_seconds:g} must be positive")
    site = site_from_args(args)  # checks the counts too
    path = run_sweep(args.config, args.grid, args.overrides, sweep_dir=args.dir,
                     launcher=args.launcher, workers=args.workers,
                     max_seconds=args.max_seconds,
                     slurm=SlurmRequest(args.tasks_per_node, args.cpus_per_task, args.time,
                                        site))
    print(path)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    """``dba3c tune``: search this node's throughput settings, print the best."""
    from dba3c.launchers.tune import tune_command

    return tune_command(args.config, args.overrides, seconds=args.seconds,
                        trial_seconds=args.trial_seconds, write=args.write, state=args.state)


def cmd_doctor(args: argparse.Namespace) -> int:
    """``dba3c doctor``: check every rank and the links between them; one table, exit 0, or
    exit 1 with one ``error:`` line naming the first problem."""
    from dba3c.launchers.doctor import doctor
    from dba3c.launchers.mpienv import world_size_hint

    return doctor(args.config, args.overrides, args.timeout, world_size_hint(), args.json,
                  environ=os.environ)


COMMANDS = {"train": cmd_train, "describe": cmd_describe, "keys": cmd_keys,
            "evaluate": cmd_evaluate, "units": cmd_units,
            "launch": cmd_launch, "plot": cmd_plot, "table": cmd_table, "sweep": cmd_sweep,
            "bench": run_bench, "tune": cmd_tune, "doctor": cmd_doctor}

if __name__ == "__main__":
    sys.exit(main())
