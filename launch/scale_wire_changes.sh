#!/usr/bin/env bash
# bfloat16 on the wire (gradients and a collective's parameter changes, `dist.wire_dtype`)
# beside float32, charged what staging costs a real rank on this machine (docs/benchmarks.md,
# "Current figures"; log 2026-11-29, parameter changes in bfloat16): first that cost
# (`dba3c bench overlap-cost`, written to bench/overlap_cost.json, which `dba3c bench scale`
# charges); then collective aggregation over 10 Gb/s at time scale 400, W = 64 at FC 128 and
# 512 (and the grid's W = 64 straggler point), bfloat16 then float32; then two more pairs of
# the FC 512 point alone, the one whose allgather is exposed. Needs root, `ip netns` and
# about 16 GB of memory; about 35 minutes on 2 cores. Run it alone: every figure is a timing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`
out=${OUT:-bench/wire_changes}
mkdir -p "$out"

dba3c bench overlap-cost --config configs/breakout_64.yaml --steps 400 --probe-steps 10
scale() {  # NAME DTYPE OPTIONS...: one W = 64 run over 10 Gb/s at s = 400
    local name=$1 dtype=$2; shift 2
    dba3c bench scale --aggregation collective --time-scale 400 --workers 64 --links 10 \
        --wire-dtype "$dtype" "$@" --out "$out/$name-$dtype.json"
}
for dtype in bfloat16 float32; do scale w64 "$dtype" --hidden 128,512; done
for run in 2 3; do
    for dtype in bfloat16 float32; do scale "w64-fc512-$run" "$dtype" --hidden 512; done
done
