#!/usr/bin/env bash
# docs/figures/pong_small_b128_eps_vw: mini-batch 128, Adam epsilon 1e-4 and value weight 1
# against the preset (log 2026-11-26 pong b128, eps, value weight; docs/decisions.md).
# Needs runs/pong-stopbelow and runs/pong-stopbelow-seed1 from launch/fig_pong_small_stopbelow.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

for d in runs/pong-stopbelow runs/pong-stopbelow-seed1; do
    [ -d "$d" ] || { echo "error: $d is missing: run launch/fig_pong_small_stopbelow.sh first" >&2; exit 2; }
done
dba3c train configs/pong_small.yaml train.batch_size=128 train.lr=0.002 eval.every=1500 \
    run.checkpoint_every=500 run.log_every=5 eval.stop_at_target=true \
    run.dir=runs/pong-b128-lr2e-3                                                # 1800 s
dba3c train configs/pong_small.yaml adam.epsilon=0.0001 eval.stop_at_target=true \
    run.dir=runs/pong-eps1e-4                                                    # 1800 s
dba3c train configs/pong_small.yaml train.value_weight=1.0 eval.stop_at_target=true \
    run.dir=runs/pong-vw1                                                        # 1800 s
dba3c train configs/pong_small.yaml train.value_weight=1.0 eval.stop_at_target=true \
    train.max_seconds=3000 run.dir=runs/pong-vw1                                 # resumed
dba3c train configs/pong_small.yaml train.value_weight=1.0 run.seed=1 \
    eval.stop_at_target=true run.dir=runs/pong-vw1-seed1                         # 1800 s
dba3c plot runs/pong-stopbelow runs/pong-stopbelow-seed1 runs/pong-b128-lr2e-3 \
    runs/pong-eps1e-4 runs/pong-vw1 runs/pong-vw1-seed1 --out docs/figures/pong_small_b128_eps_vw
