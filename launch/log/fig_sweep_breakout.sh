#!/usr/bin/env bash
# docs/figures/sweep_breakout: Breakout throughput against FC size and parameter-server count,
# six 60-second local dry runs of 1 worker + P PS (log 2026-11-23 breakout sweep). About 7 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c sweep configs/breakout.yaml --grid model.hidden=32,128,512 --grid dist.ps=1,2 \
    --workers 1 --max-seconds 60 --dir runs/sweep-breakout eval.every=0 run.progress=none
dba3c plot runs/sweep-breakout --out docs/figures/sweep_breakout
