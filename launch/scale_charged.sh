#!/usr/bin/env bash
# The emulated cluster's current collective figures, charged with what staging costs a real
# rank on this machine (docs/benchmarks.md, "Current figures", emulated tables; log
# 2026-11-29, "the lost wake-up"): first `dba3c bench overlap-cost` (one real rank on every
# core, overlapped against serial steps, into bench/overlap_cost.json, which `bench scale`
# charges every overlapped point), then three runs each of W = 64 at FC 128 over 10 Gb/s
# (with its 4-straggler point) and W = 128 over 10 Gb/s, both at time scale 400 (at 200 the
# 2-core host's own share of each step shows: 5% at W = 64, 22% at W = 128), of W = 64 over
# 100 Gb/s (time scale 5 x 200 = 1000), and W = 64 at FC 512 over 10 Gb/s twice (the bench
# raises it to 400 itself); then three runs of W = 16 at FC 128 over 10 Gb/s, time scale
# 400 (the predicted Figure 8's E(16), docs/results.md). Needs root, `ip netns` and about
# 16 GB of memory; about 45 minutes on 2 cores. Run it alone: every figure is a timing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`
out=${OUT:-bench/charged}
mkdir -p "$out"

dba3c bench overlap-cost --config configs/breakout_64.yaml --steps 400 --probe-steps 10
scale() {  # NAME TIME_SCALE OPTIONS...
    local name=$1 s=$2; shift 2
    dba3c bench scale --aggregation collective --time-scale "$s" "$@" --out "$out/$name.json"
}
for run in 1 2 3; do
    scale "w64-fc128-10-$run" 400 --workers 64 --links 10 --hidden 128
    scale "w128-fc128-10-$run" 400 --workers 128 --links 10 --hidden 128
    scale "w64-fc128-100-$run" 200 --workers 64 --links 100 --hidden 128
done
for run in 1 2; do scale "w64-fc512-10-$run" 200 --workers 64 --links 10 --hidden 512; done
for run in 1 2 3; do scale "w16-fc128-10-$run" 400 --workers 16 --links 10 --hidden 128; done
