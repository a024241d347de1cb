#!/usr/bin/env bash
# The one-process node benchmark of each preset (docs/benchmarks.md, "Current figures"):
# ceilings, data points/s, node efficiency, MFU, 1 worker + 1 PS. Writes bench/results.json
# (each run replaces it); launch/bench_node.sh --log also writes a docs/log/ entry. Run on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench node --quick --config configs/breakout.yaml "$@"
dba3c bench node --quick --config configs/pong_small.yaml "$@"
