#!/usr/bin/env bash
# docs/figures/pong_small_b64: Pong with mini-batch 64 at lr 1e-3 and 1.4e-3, and the 1.4e-3 run
# resumed to the target (log 2026-11-26 pong mini-batch 64). About 2 hours on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c train configs/pong_small.yaml train.batch_size=64 run.dir=runs/pong-b64            # 1800 s
dba3c train configs/pong_small.yaml train.batch_size=64 train.lr=0.0014 \
    run.dir=runs/pong-b64-lr14                                                           # 1800 s
dba3c train configs/pong_small.yaml train.batch_size=64 train.lr=0.0014 \
    run.dir=runs/pong-b64-lr14 train.max_seconds=3600 eval.stop_at_target=true           # resumed
dba3c plot runs/pong-b64-lr14 --out docs/figures/pong_small_b64
