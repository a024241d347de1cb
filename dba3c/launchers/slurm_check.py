"""``python -m dba3c.launchers.slurm_check CONFIG NTASKS [KEY=VALUE ...]``: refuse, in the job
log and before any rank starts, a layout that NTASKS tasks cannot hold (exit 2, one line)."""

from __future__ import annotations

import sys

from dba3c.distributed.roles import make_roles
from dba3c.errors import UserError
from dba3c.preset import load_config


def main(argv: list[str]) -> int:
    """Check the rank layout; print it on success."""
    if len(argv) < 2 or not argv[1].isdigit():
        print("error: usage: python -m dba3c.launchers.slurm_check CONFIG NTASKS [KEY=VALUE ...]",
              file=sys.stderr)
        return 2
    try:
        cfg = load_config(argv[0], argv[2:])
        roles = make_roles(int(argv[1]), cfg)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("dba3c: layout: " + "; ".join(roles.describe()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
