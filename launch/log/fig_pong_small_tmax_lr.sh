#!/usr/bin/env bash
# docs/figures/pong_small_tmax_lr: t_max 20 and lr 2e-3 against the preset's seed 0, then
# evaluations every 1,500 steps (log 2026-11-26 pong t_max 20, lr, eval every; docs/decisions.md).
# Needs runs/pong-stopbelow from launch/fig_pong_small_stopbelow.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

for d in runs/pong-stopbelow; do
    [ -d "$d" ] || { echo "error: $d is missing: run launch/fig_pong_small_stopbelow.sh first" >&2; exit 2; }
done
dba3c train configs/pong_small.yaml train.t_max=20 run.dir=runs/pong-tmax20      # stopped at 20 min
dba3c train configs/pong_small.yaml train.lr=0.002 run.dir=runs/pong-b64-lr2e-3  # 1800 s
dba3c train configs/pong_small.yaml train.lr=0.002 run.dir=runs/pong-b64-lr2e-3 \
    train.max_seconds=3600 eval.stop_at_target=true                              # resumed, stopped at 39 min
dba3c plot runs/pong-stopbelow runs/pong-tmax20 runs/pong-b64-lr2e-3 --out docs/figures/pong_small_tmax_lr
dba3c train configs/pong_small.yaml eval.every=1500 run.dir=runs/pong-eval1500   # 1800 s
