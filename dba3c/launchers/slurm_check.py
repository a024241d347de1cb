"""``python -m dba3c.launchers.slurm_check CONFIG NTASKS [KEY=VALUE | --overrides FILE ...]``:
refuse, in the job log and before any rank starts, a layout that NTASKS tasks cannot hold (exit
2, one line); print the layout and the allocation with the node-hours its time limit can spend,
and a warning when that limit leaves no room after ``train.max_seconds``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from dba3c.config import overrides_file
from dba3c.distributed.roles import make_roles
from dba3c.errors import UserError
from dba3c.launchers.slurm_site import allocation_lines, short_time_limit, slurm_minutes
from dba3c.preset import load_config


def main(argv: list[str]) -> int:
    """Check the rank layout; print it on success."""
    if len(argv) < 2 or not argv[1].isdigit():
        print("error: usage: python -m dba3c.launchers.slurm_check CONFIG NTASKS [KEY=VALUE ...]",
              file=sys.stderr)
        return 2
    try:
        cfg = load_config(argv[0], expand_overrides_files(argv[2:]))
        roles = make_roles(int(argv[1]), cfg)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("dba3c: layout: " + "; ".join(roles.describe()), flush=True)
    nodes = os.environ.get("SLURM_JOB_NUM_NODES", "")
    per_node = roles.world_size // int(nodes) if nodes.isdigit() and int(nodes) else 1
    target = cfg.eval.target_score if cfg.eval.stop_at_target else None
    minutes = job_minutes(os.environ)
    for line in allocation_lines(roles.world_size, max(1, per_node), minutes, target):
        print(f"dba3c: {line}", flush=True)
    if (warning := short_time_limit(minutes, cfg.train.max_seconds)) is not None:
        print(f"warning: {warning}", flush=True)
    return 0


def expand_overrides_files(args: list[str]) -> list[str]:
    """``--overrides FILE`` pairs replaced by the file's ``KEY=VALUE`` items, in place."""
    out, items = [], iter(args)
    for arg in items:
        if arg == "--overrides":
            path = next(items, None)
            if path is None:
                raise UserError("--overrides needs a FILE")
            out += overrides_file(path)
        else:
            out.append(arg)
    return out


def job_minutes(environ: Mapping[str, str]) -> int | None:
    """This job's time limit in minutes, asked of squeue (None outside a job, or unlimited)."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%l"], capture_output=True,
                             text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return slurm_minutes(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
