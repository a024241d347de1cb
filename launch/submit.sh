#!/usr/bin/env bash
# The paper's 64-worker Breakout run as one Slurm job through submitit (docs/cluster.md,
# "submitit"): 64 workers, 4 parameter servers and an evaluator, one task per node. Feeds no figure yet:
# no real-cluster run has been made. Extra arguments go to `dba3c submit` (e.g. --partition).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c submit configs/breakout_64.yaml --nodes 69 --tasks-per-node 1 --time 120 --wait "$@"
