#!/usr/bin/env bash
# docs/figures/pong_small_frame_size (online_vs_step.png): Pong at 42 x 42 and 64 x 64 frames,
# seed 0 each, and the bench of 84, 64 and 42 (log 2026-11-26 pong smaller frames and smaller
# frames throughput; docs/decisions.md). The 42 run was stopped by hand at 2310 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c train configs/pong_small.yaml model.frame_size=42 eval.stop_at_target=true \
    run.dir=runs/f42_s0                                                          # 1800 s
dba3c train configs/pong_small.yaml model.frame_size=42 eval.stop_at_target=true \
    train.max_seconds=2700 run.dir=runs/f42_s0            # resumed, stopped (SIGINT) at 2310 s
dba3c train configs/pong_small.yaml model.frame_size=64 eval.stop_at_target=true \
    run.dir=runs/f64_s0                                                          # 1800 s
dba3c train configs/pong_small.yaml model.frame_size=64 eval.stop_at_target=true \
    train.max_seconds=2700 run.dir=runs/f64_s0                                   # resumed
for size in 84 64 42; do
    dba3c bench node --quick --config configs/pong_small.yaml model.frame_size=$size
done
dba3c plot runs/f42_s0 runs/f64_s0 --out docs/figures/pong_small_frame_size  # online_vs_step.png kept
