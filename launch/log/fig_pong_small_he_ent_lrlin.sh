#!/usr/bin/env bash
# docs/figures/pong_small_he_ent_lrlin (online_vs_step.png): He initialisation, entropy weight
# 0.003, a linearly decaying lr and t_max 3 against the preset's seeds, per update (log 2026-11-26
# pong He, entropy, lr decay, t_max 3; docs/decisions.md). Needs the runs of launch/fig_pong_small_stopbelow.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

for d in runs/pong-stopbelow runs/pong-stopbelow-seed1 runs/pong-stopbelow-seed2; do
    [ -d "$d" ] || { echo "error: $d is missing: run launch/fig_pong_small_stopbelow.sh first" >&2; exit 2; }
done
dba3c train configs/pong_small.yaml model.init=he eval.stop_at_target=true \
    run.dir=runs/pong-he                                                         # 1800 s
dba3c train configs/pong_small.yaml train.entropy_beta=0.003 eval.stop_at_target=true \
    run.dir=runs/pong-ent3e-3                                                    # 1800 s
dba3c bench node --quick --config configs/pong_small.yaml
dba3c train configs/pong_small.yaml train.lr=0.002 train.lr_schedule=linear \
    train.max_steps=80000 eval.stop_at_target=true run.dir=runs/pong-lrlin       # 1800 s
dba3c train configs/pong_small.yaml train.lr=0.002 train.lr_schedule=linear \
    train.max_steps=80000 eval.stop_at_target=true train.max_seconds=2700 \
    run.dir=runs/pong-lrlin                                                      # resumed
dba3c train configs/pong_small.yaml train.t_max=3 eval.stop_at_target=true \
    run.dir=runs/pong-tmax3                                                      # 1800 s
dba3c plot runs/pong-stopbelow runs/pong-stopbelow-seed1 runs/pong-stopbelow-seed2 \
    runs/pong-he runs/pong-ent3e-3 runs/pong-lrlin runs/pong-tmax3 \
    --out docs/figures/pong_small_he_ent_lrlin                # online_vs_step.png kept
