#!/usr/bin/env bash
# The emulated cluster's current collective figures, charged with what staging costs a real
# rank on this machine (docs/benchmarks.md, "Current figures", emulated tables; log 2026-11-29):
# first `dba3c bench overlap-cost` (one real rank on every core, overlapped against serial
# steps, into bench/overlap_cost.json, which `bench scale` charges every overlapped point),
# then W = 64 at FC 128 over 10 Gb/s three times (with its 4-straggler point), over 100 Gb/s,
# W = 128 over 10 Gb/s, and W = 64 at FC 512 over 10 Gb/s twice. Needs root, `ip netns` and
# about 16 GB of memory; about 20 minutes on 2 cores. Run it alone: every figure is a timing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`
out=${OUT:-bench/charged}
mkdir -p "$out"

dba3c bench overlap-cost --config configs/breakout_64.yaml --steps 400 --probe-steps 10
scale() {  # NAME OPTIONS...
    local name=$1; shift
    dba3c bench scale --aggregation collective --time-scale 200 "$@" --out "$out/$name.json"
}
for run in 1 2 3; do scale "w64-fc128-10-$run" --workers 64 --links 10 --hidden 128; done
scale w64-fc128-100 --workers 64 --links 100 --hidden 128
scale w128-fc128-10 --workers 128 --links 10 --hidden 128
for run in 1 2; do scale "w64-fc512-10-$run" --workers 64 --links 10 --hidden 512; done
