#!/usr/bin/env bash
# docs/figures/breakout_60min: the 60-minute Breakout curve of the preset, one process
# (docs/results.md, "Current figures"; log 2026-11-24 breakout 60 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c train configs/breakout.yaml train.max_seconds=3600 run.dir=runs/breakout-60min
dba3c plot runs/breakout-60min --out docs/figures/breakout_60min
