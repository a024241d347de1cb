#!/usr/bin/env bash
# docs/figures/breakout: the 30-minute Breakout curve, 1 worker + 1 PS (log 2026-11-23 breakout
# 30-minute curve); the same run is the long-run memory and disk measurement (launch/log/bench_long.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench long --seconds 1800 --run-dir runs/breakout-30min
dba3c plot runs/breakout-30min --out docs/figures/breakout
