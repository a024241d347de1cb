#!/usr/bin/env bash
# docs/figures/pong_small_stopbelow: the preset, seeds 0, 1 and 2, each 30 minutes then resumed
# to the target (docs/results.md, "Current figures": the time to target over seeds; log 2026-11-26
# pong stop below target). About 2.5 hours on 2 cores; other Pong recipes compare with these runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c train configs/pong_small.yaml run.dir=runs/pong-stopbelow                          # 1800 s
dba3c train configs/pong_small.yaml run.dir=runs/pong-stopbelow \
    train.max_seconds=3600 eval.stop_at_target=true                                      # resumed
dba3c train configs/pong_small.yaml run.seed=1 run.dir=runs/pong-stopbelow-seed1         # 1800 s
dba3c train configs/pong_small.yaml run.seed=1 run.dir=runs/pong-stopbelow-seed1 \
    train.max_seconds=3600 eval.stop_at_target=true                                      # resumed
dba3c train configs/pong_small.yaml run.seed=2 run.dir=runs/pong-stopbelow-seed2         # 1800 s
dba3c train configs/pong_small.yaml run.seed=2 run.dir=runs/pong-stopbelow-seed2 \
    train.max_seconds=3000 eval.stop_at_target=true                                      # resumed
dba3c plot runs/pong-stopbelow runs/pong-stopbelow-seed1 runs/pong-stopbelow-seed2 \
    --out docs/figures/pong_small_stopbelow
