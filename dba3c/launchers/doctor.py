"""``dba3c doctor``: a preflight of the ranks and links a job would run on, before it spends
node-hours. Alone (one process), under ``mpiexec``/``srun`` (every rank runs it) or as
``sbatch slurm/doctor.sh`` with the real job's node count.

What each rank checks, how the pairs are measured and what counts as a problem:
:mod:`dba3c.launchers.preflight`. Rank 0 prints one table (a row per rank, then the pairs,
then the launchers) and exits 0, or 1 with one ``error:`` line naming the first problem. A
rank that sends nothing for ``--timeout`` seconds ends the whole job non-zero, named.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from dba3c.errors import UserError
from dba3c.launchers.preflight.checks import launch_info, local_report
from dba3c.launchers.preflight.protocol import Outcome, run_ranks
from dba3c.launchers.preflight.report import table, verdict
from dba3c.launchers.srun_options import library_version


def doctor(config: str, overrides: Sequence[str], timeout_s: float, world_size: int,
           json_path: str | None = None, out: TextIO | None = None,
           environ: Mapping[str, str] | None = None) -> int:
    """``dba3c doctor``: alone (``world_size`` 1: no MPI) or as one rank of an MPI job.
    ``environ`` (the launcher's environment: this process's by default) names the PMI and
    holds ``DBA3C_SRUN_MPI``, which rank 0 reads as the sbatch scripts do (:func:`launch_info`).
    Rank 0 prints progress on stderr, the table on ``out`` (stdout) and the first problem
    as one ``error:`` line; ``json_path``: rank 0 also writes the rows, pairs, launchers and
    problem there (not when a silent rank ends the job).
    Returns the exit code (0, or 1 for a problem; every rank returns rank 0's)."""
    from dba3c.outputs import check_output_file
    from dba3c.preset import load_config

    if not timeout_s > 0:
        raise UserError(f"--timeout {timeout_s:g} must be a positive number of seconds")
    if json_path:
        check_output_file(json_path, f"--json {json_path}")  # not after minutes of checks
    cfg = load_config(config, list(overrides))
    out = out or sys.stdout
    env: Mapping[str, str] = os.environ if environ is None else environ

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if world_size == 1:
        progress("doctor: 1 rank (no MPI job): checking this process")
        rows = [local_report(0, cfg, library_version(), env)]  # asked without starting MPI
        launch = launch_info(env)
        problem = verdict(rows, [], world_size=1, launch=launch)
        outcome = Outcome(1 if problem else 0, rows, [], problem, launch)
    else:
        from dba3c.distributed.transport.mpi import MpiTransport

        t = MpiTransport(cfg.dist.collective_algorithm)
        library = library_version()  # after MPI started (asked first, it keeps MPI off)
        outcome = run_ranks(t, lambda: local_report(t.rank, cfg, library, env), timeout_s,
                            progress, launch_info(env) if t.rank == 0 else None)
        if t.rank != 0:
            return outcome.code
    print(table(outcome.rows, outcome.pairs, outcome.launch), end="", file=out, flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps(
            {"rows": [asdict(r) for r in outcome.rows],
             "pairs": [asdict(p) for p in outcome.pairs],
             "launch": asdict(outcome.launch) if outcome.launch else None,
             "problem": outcome.problem},
            indent=1) + "\n")
    if outcome.problem:
        print(f"error: {outcome.problem}", file=sys.stderr, flush=True)
    return outcome.code
