#!/usr/bin/env bash
# Memory and disk over one 30-minute 1 worker + 1 PS Breakout run (docs/benchmarks.md; log
# 2026-11-23 long run); its run directory also draws docs/figures/breakout (launch/log/fig_breakout.sh).
# Writes bench/long.json and, with --log (passed on: launch/log/bench_long.sh --log), a docs/log/ entry.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench long --seconds 1800 --run-dir runs/breakout-30min "$@"
