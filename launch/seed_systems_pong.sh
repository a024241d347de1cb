#!/usr/bin/env bash
# The seed systems (BA3C, PAAC, GA3C, A3C) on one engine: Pong after 10 minutes each, then a
# greedy evaluation of 30 games (docs/results.md, "Current figures"; log 2026-11-23 seed systems).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c train configs/pong_small.yaml train.max_seconds=600 eval.every=0 run.dir=runs/cmp/ba3c
dba3c train configs/paac_pong.yaml  train.max_seconds=600 eval.every=0 run.dir=runs/cmp/paac
dba3c train configs/ga3c_pong.yaml  train.max_seconds=600 eval.every=0 run.dir=runs/cmp/ga3c
dba3c launch configs/a3c_pong.yaml --workers 2 --ps 1 train.max_seconds=600 eval.every=0 run.dir=runs/cmp/a3c
for SYSTEM in ba3c paac ga3c a3c; do
    dba3c evaluate runs/cmp/$SYSTEM --episodes 30
done
