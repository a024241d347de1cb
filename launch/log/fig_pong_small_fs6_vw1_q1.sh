#!/usr/bin/env bash
# docs/figures/pong_small_fs6_vw1_q1 (online_vs_step.png): frame skip 6, value weight 1 on seeds
# 0-2, queue size 1, against the preset's seeds, per update (log 2026-11-26 pong frame skip 6,
# vw1, queue; docs/decisions.md). Needs the runs of launch/fig_pong_small_stopbelow.sh and launch/log/fig_pong_small_b128_eps_vw.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

for d in runs/pong-stopbelow runs/pong-stopbelow-seed1 runs/pong-stopbelow-seed2 runs/pong-vw1 runs/pong-vw1-seed1; do
    [ -d "$d" ] || { echo "error: $d is missing: run launch/fig_pong_small_stopbelow.sh and launch/log/fig_pong_small_b128_eps_vw.sh first" >&2; exit 2; }
done
dba3c bench node --quick --config configs/pong_small.yaml env.frame_skip=4   # then =6
dba3c bench node --quick --config configs/pong_small.yaml env.frame_skip=6
dba3c train configs/pong_small.yaml env.frame_skip=6 eval.stop_at_target=true \
    run.dir=runs/pong-fs6                                                        # stopped at 25 min
dba3c train configs/pong_small.yaml train.value_weight=1.0 run.seed=2 \
    eval.stop_at_target=true run.dir=runs/pong-vw1-seed2                         # 1800 s
dba3c train configs/pong_small.yaml train.value_weight=1.0 run.seed=2 \
    eval.stop_at_target=true train.max_seconds=3000 run.dir=runs/pong-vw1-seed2  # resumed
dba3c train configs/pong_small.yaml train.queue_size=1 eval.stop_at_target=true \
    run.dir=runs/pong-q1                                                         # 1800 s
dba3c train configs/pong_small.yaml train.value_weight=1.0 run.seed=1 \
    eval.stop_at_target=true train.max_seconds=2700 run.dir=runs/pong-vw1-seed1  # resumed
dba3c plot runs/pong-stopbelow runs/pong-stopbelow-seed1 runs/pong-stopbelow-seed2 \
    runs/pong-vw1 runs/pong-vw1-seed1 runs/pong-vw1-seed2 runs/pong-fs6 runs/pong-q1 \
    --out docs/figures/pong_small_fs6_vw1_q1                 # online_vs_step.png kept
