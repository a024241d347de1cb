"""``dba3c launch``: a local multi-process dry run under mpiexec.

The world size follows from the requested layout
(:func:`dba3c.distributed.roles.required_world_size`);
mpiexec comes from the active Python environment (the ``mpich`` wheel) or else from PATH.
Output of every rank streams to this terminal; a failing rank ends the whole job.
``DBA3C_MPIEXEC_ARGS`` adds mpiexec options, e.g. the hydra options that place the ranks on
the emulated nodes of ``slurm/local-cluster.sh`` (its ``mpiexec-args`` command prints them).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from dba3c.distributed.roles import make_roles, required_world_size
from dba3c.errors import UserError
from dba3c.preset import load_config


def find_mpiexec() -> str:
    """mpiexec next to this Python (the mpich wheel) or on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.exists():
        return str(local)
    found = shutil.which("mpiexec")
    if not found:
        raise UserError("mpiexec not found: install the `mpich` wheel (pip install mpich) "
                        "or load your site's MPI")
    return found


def launch_layout(config: str, overrides: list[str], *, workers: int, ps: int | None,
                  evaluator: bool) -> tuple[list[str], int]:
    """(the overrides every rank gets, the world size) of this layout, validated: the
    options become overrides, ``workers`` wins over a preset's ``dist.workers``."""
    if workers < 1:
        raise UserError(f"--workers {workers} must be at least 1")
    extra = list(overrides)
    if ps is not None:
        extra.append(f"dist.ps={ps}")
    if evaluator:
        extra.append("eval.rank=true")
    cfg = load_config(config, extra)
    if cfg.dist.workers not in (0, workers) and not any(
            item.startswith("dist.workers=") for item in overrides):
        extra.append(f"dist.workers={workers}")  # --workers wins over a preset's value
        cfg = load_config(config, extra)  # (breakout_64.yaml says 64)
    world = required_world_size(cfg, workers)
    make_roles(world, cfg)  # refuses impossible layouts now, not in every rank
    return extra, world


def launch_environment() -> dict[str, str]:
    """This process's environment for mpiexec and its ranks: unbuffered Python output, and
    MPICH's single-copy (process_vm_readv) transfers between ranks on one host, so a multi-MB
    parameter message needs two progress calls, not one per 64 KB cell (docs/decisions.md,
    "single-copy transfers")."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("MPIR_CVAR_CH4_CMA_ENABLE", "1")
    return env


def launch_command(config: str, overrides: list[str], *, workers: int, ps: int | None,
                   evaluator: bool, mpiexec_args: list[str] | None = None) -> list[str]:
    """The mpiexec command line for this layout (validated before anything starts);
    ``mpiexec_args`` go before ``-n`` (hosts, launcher, environment)."""
    extra, world = launch_layout(config, overrides, workers=workers, ps=ps,
                                 evaluator=evaluator)
    if world == 1:
        return rank_program(config, extra)
    return [find_mpiexec(), *(mpiexec_args or []), "-n", str(world),
            *rank_program(config, extra)]


def rank_program(config: str, extra: list[str]) -> list[str]:
    """What every rank runs: ``dba3c train CONFIG EXTRA...`` in this Python."""
    return [sys.executable, "-m", "dba3c", "train", config, *extra]


def launch_local(config: str, overrides: list[str], *, workers: int, ps: int | None = None,
                 evaluator: bool = False) -> int:
    """Run the job; returns its exit code. ``DBA3C_MPIEXEC_ARGS`` (shell words) are extra
    mpiexec options."""
    extra = os.environ.get("DBA3C_MPIEXEC_ARGS", "")
    try:
        mpiexec_args = shlex.split(extra)
    except ValueError as e:
        raise UserError(f"DBA3C_MPIEXEC_ARGS={extra!r} must be shell words "
                        f"(mpiexec options): {e}") from None
    cmd = launch_command(config, overrides, workers=workers, ps=ps, evaluator=evaluator,
                         mpiexec_args=mpiexec_args)
    print("launch: " + " ".join(cmd), file=sys.stderr, flush=True)
    env = launch_environment()
    # Stopping goes through this process: mpiexec runs in its own process group (a Ctrl-C
    # reaches it once, from here) and gets SIGINT/SIGTERM, which it forwards to every rank
    # (rank 0 checkpoints and stops the run, the others ignore them). MPICH's mpiexec dies on
    # SIGUSR2 and SIGHUP, so those become SIGTERM.
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, process_group=0)
    forward = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM,
               signal.SIGUSR2: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}

    def relay(signum: int, _frame: FrameType | None) -> None:
        proc.send_signal(forward[signal.Signals(signum)])

    before = {sig: signal.signal(sig, relay) for sig in forward}
    try:
        return proc.wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
