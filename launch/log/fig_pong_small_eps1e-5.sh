#!/usr/bin/env bash
# docs/figures/pong_small_eps1e-5: Pong with Adam epsilon 1e-5 and lr 3e-4, 30 minutes
# (log 2026-11-23 pong small curve, its 2026-11-25 follow-up; docs/decisions.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c train configs/pong_small.yaml adam.epsilon=1e-5 train.lr=3e-4 run.dir=runs/pong-eps
dba3c plot runs/pong-eps --out docs/figures/pong_small_eps1e-5
