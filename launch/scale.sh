#!/usr/bin/env bash
# The emulated-cluster ps grid, 54 points (docs/benchmarks.md, "Current figures", emulated table,
# and docs/figures/scale; log 2026-11-25 scale grid; the two W = 128 points since 2026-11-27).
# Needs root, `ip netns` and about 16 GB of memory (132 ranks at W = 128); about 20 minutes on
# 2 cores; starts and stops the emulated cluster itself. --log (passed on) writes a docs/log/
# entry.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench scale --time-scale 10 "$@"
dba3c plot bench/scale.json --out docs/figures/scale
