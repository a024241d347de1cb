"""Many runs in one MPI job: ``python -m dba3c.benchmarks.scale.job JOB.json`` on every rank.

``dba3c bench scale`` measures dozens of short synthetic runs; started one ``mpiexec`` each,
a 64-worker run spends 40-190 s starting (hydra, imports, a simulator, TCP connections). Here
one job of as many ranks as its largest run plays them in turn, paying that once:

- run i of n ranks plays on world ranks 0..n-1 through a
  :class:`~dba3c.distributed.transport.mpi.TransportView` (same COMM_WORLD, point to point
  only, its own tags); the other ranks sit it out (a collective run's one ``Comm_split`` of
  COMM_WORLD needs them too: :func:`~dba3c.distributed.collective.ranks.sit_out_collective_run`);
- between runs every rank of the world meets in :meth:`MpiTransport.barrier`, which sleeps
  (``IDLE_POLL_S``) while it waits; before it, each rank cancels the run's standing receives
  and gives the memory the run freed back to the system (:func:`release_memory`), so a run's
  peak RSS is its own, not what earlier runs left;
- everything in a run is the real code (:func:`dba3c.distributed.run.play_rank`): roles, chief,
  parameter servers, Adam, metrics, the stall watchdog; a failing rank aborts the whole job;
- rank 0 writes ``dba3c-scalejob start I`` and ``dba3c-scalejob end I`` lines on stdout
  (:func:`job_event` parses them), so the driver knows which run is going.

The env spaces (observation shape, number of actions) that a run's network needs come in
the job file from the driver, which opened the simulator once: the ranks import neither
gymnasium nor ale-py (30 MB each). This module owns the JOB.json format (:func:`write_job`,
:func:`read_job`).
"""

from __future__ import annotations

import ctypes
import gc
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from dba3c.errors import UserError
from dba3c.games.envs import Spaces, SpacesKey, remember_spaces
from dba3c.preset import load_config

EVENT_PREFIX = "dba3c-scalejob"
IDLE_POLL_S = 0.05  # between runs: ranks that sit a run out poll the barrier this often


@dataclass(frozen=True)
class JobRun:
    """One run of a job: ``dba3c train CONFIG OVERRIDES`` on the first ``ranks`` ranks."""

    config: str
    overrides: tuple[str, ...]
    ranks: int


def write_job(path: Path, runs: list[JobRun], spaces: list[tuple[SpacesKey, Spaces]]) -> None:
    """Write the runs of a job and the env spaces of their configs
    (:func:`dba3c.games.envs.env_spaces` of each) to ``path`` (JSON)."""
    path.write_text(json.dumps({"runs": [asdict(r) for r in runs],
                                "spaces": [[*key, *value] for key, value in spaces]},
                               indent=1) + "\n")


def read_job(path: Path) -> tuple[list[JobRun], list[tuple[SpacesKey, Spaces]]]:
    """The runs and env spaces written by :func:`write_job`."""
    job = json.loads(path.read_text())
    runs = [JobRun(r["config"], tuple(r["overrides"]), r["ranks"]) for r in job["runs"]]
    spaces = [((env_id, rgb, frame_size, full), (tuple(shape), num_actions))
              for env_id, rgb, frame_size, full, shape, num_actions in job["spaces"]]
    return runs, spaces


def event_line(kind: str, index: int) -> str:
    """Rank 0's line when run ``index`` starts (``kind`` start) or ends (end)."""
    return f"{EVENT_PREFIX} {kind} {index}\n"


def job_event(line: str) -> tuple[str, int] | None:
    """(start or end, run index) of a line of :func:`event_line`; None for any other line."""
    words = line.split()
    if len(words) == 3 and words[0] == EVENT_PREFIX and words[1] in ("start", "end") \
            and words[2].isdigit():
        return words[1], int(words[2])
    return None


def release_memory() -> None:
    """Free unreachable Python objects and give the C heap's free pages back to the system
    (glibc's ``malloc_trim``; nothing elsewhere). After a 1.3 MB gradient buffer allocated
    with ``mmap`` is freed, glibc raises its mmap threshold above that size, so later buffers
    of the size come from the heap; freed, they stay in the process's RSS (a PS at 64 workers
    kept 40-170 MB more from point to point of a job)."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def run_job(runs: list[JobRun], spaces: list[tuple[SpacesKey, Spaces]]) -> int:
    """Play every run in turn on this rank of the MPI job (see the module docstring)."""
    from dba3c.distributed.collective.ranks import sit_out_collective_run
    from dba3c.distributed.run import ignore_polite_signals, play_rank, rank_spec
    from dba3c.distributed.transport.mpi import MpiTransport, TransportView

    for key, value in spaces:
        remember_spaces(key, value)
    configs = [load_config(r.config, list(r.overrides)) for r in runs]
    world = MpiTransport(configs[0].dist.collective_algorithm)
    world.gather_hosts()  # here, where every rank is: the points' chiefs record them
    if world.rank != 0:
        ignore_polite_signals()
    for index, (run, cfg) in enumerate(zip(runs, configs, strict=True)):
        if world.rank == 0:
            sys.stdout.write(event_line("start", index))
            sys.stdout.flush()
        if world.rank < run.ranks:
            view = TransportView(world, run.ranks, index)
            try:
                spec = rank_spec(view, cfg)
            except UserError as e:  # every rank of the run finds it; rank 0 ends the job
                if world.rank == 0:
                    print(f"error: run {index}: {e}", file=sys.stderr, flush=True)
                    world.abort(2)
            else:
                play_rank(view, cfg, spec)
        elif cfg.dist.aggregation == "collective":
            sit_out_collective_run(world)
        world.cancel_receives()
        release_memory()  # before the barrier: the driver resets peaks at the next start line
        world.barrier(IDLE_POLL_S)
        if world.rank == 0:
            sys.stdout.write(event_line("end", index))
            sys.stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    """``python -m dba3c.benchmarks.scale.job JOB.json`` (under mpiexec)."""
    if len(argv) != 1:
        print("usage: python -m dba3c.benchmarks.scale.job JOB.json (under mpiexec)",
              file=sys.stderr)
        return 2
    return run_job(*read_job(Path(argv[0])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
