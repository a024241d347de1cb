#!/usr/bin/env bash
# docs/figures/pong_small: the first Pong curve, one process, 30 + 15 minutes (log 2026-11-23
# pong small curve). The preset has changed since (32 envs, mini-batch 64, lr 1.4e-3, evaluations
# that stop below the target), so this command now trains today's preset, not the one drawn.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c train configs/pong_small.yaml                       # 1800 s
dba3c train configs/pong_small.yaml train.max_seconds=2700    # resumed for 15 more minutes
dba3c plot runs/pong_small --out docs/figures/pong_small
