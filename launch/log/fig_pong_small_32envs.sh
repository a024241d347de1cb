#!/usr/bin/env bash
# docs/figures/pong_small_32envs: Pong with 32 envs in one prediction, 30 + 30 minutes
# (log 2026-11-26 pong 32 envs). Drawn with the preset of that day (mini-batch 32, lr 1e-3):
# today's preset trains on 64 data points a step.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c train configs/pong_small.yaml run.dir=runs/pong-32env                # 1800 s
dba3c train configs/pong_small.yaml run.dir=runs/pong-32env \
    train.max_seconds=3600 eval.stop_at_target=true                         # resumed
dba3c plot runs/pong-32env --out docs/figures/pong_small_32envs
