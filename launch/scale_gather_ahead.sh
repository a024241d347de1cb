#!/usr/bin/env bash
# The FC layer gathered ahead (`dist.gather_ahead`) at W = 64 over 10 Gb/s, s = 400, charged
# what staging costs a real rank on this machine (bench/overlap_cost.json, from
# `dba3c bench overlap-cost`; log 2026-11-30, the FC layer gathered ahead): first the
# analytic model of both schedules when the collectives get a share of the link; then
# alternating pairs, gathered ahead first: FC 512 in bfloat16 (three pairs) and float32
# (two), FC 128 in bfloat16 (one). Needs root, `ip netns` and about 16 GB of memory; about
# 35 minutes on 2 cores. Run it alone: every figure is a timing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`
out=${OUT:-bench/ahead}
mkdir -p "$out"

PYTHONPATH=. python - <<'PY'
from dba3c.benchmarks.scale.model import (ADAM_S_PER_PARAM, net_buckets, overlap_stages,
                                          overlapped_step_seconds)
from dba3c.learning.models import NetSpec
tc, s, cost = 0.0128, 400, 0.04
spec = NetSpec("ba3c", 512, (4, 84, 84), 6)
n, buckets = spec.layout().num_params, net_buckets(spec)
for wire in ("bfloat16", "float32"):
    for share in (1.0, 0.74, 0.71, 0.55):  # 1.0: the model; the rest measured (2026-11-27)
        stages = overlap_stages(buckets, 64, tc * (1 + cost), 10e9 / 8 * share, "recursive",
                                50e-6, True, wire)
        before, ahead = (overlapped_step_seconds(stages, ADAM_S_PER_PARAM * n / 64 / s, a)
                         for a in (False, True))
        print(f"FC 512 {wire}, link share {share:g}: as before {1e3 * before:.2f} ms, "
              f"gathered ahead {1e3 * ahead:.2f} ms")
PY

scale() {  # HIDDEN DTYPE RUN: one pair, gathered ahead first
    for ahead in always never; do
        dba3c bench scale --aggregation collective --time-scale 400 --workers 64 --links 10 \
            --hidden "$1" --wire-dtype "$2" "dist.gather_ahead=$ahead" \
            --out "$out/w64-fc$1-$2-ahead-$ahead-$3.json"
    done
}
for run in 1 2 3; do scale 512 bfloat16 "$run"; done
for run in 1 2; do scale 512 float32 "$run"; done
scale 128 bfloat16 1
