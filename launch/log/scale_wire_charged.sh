#!/usr/bin/env bash
# Gradients in bfloat16 on the wire beside float32, charged what staging costs a real rank
# here (log 2026-11-29, wire dtype charged). Its figures came from the code of that day, when
# `--wire-dtype bfloat16` sent only the gradients in bfloat16; since the same day's later
# change a collective's parameter changes travel in bfloat16 too, so this script now
# measures that (launch/scale_wire_changes.sh is the current recipe): collective aggregation over 10 Gb/s at time scale 400, W = 64 at FC 128 and 512
# (and the grid's W = 64 straggler point), then W = 128 at FC 128; bfloat16 first, then
# float32, at each W. `dba3c bench scale` charges bench/overlap_cost.json
# (`launch/scale_charged.sh` measures it first). Needs root, `ip netns` and about 16 GB of
# memory; about 25 minutes on 2 cores. Run it alone: every figure is a timing.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`
out=${OUT:-bench/wire}
mkdir -p "$out"

for dtype in bfloat16 float32; do
    dba3c bench scale --aggregation collective --time-scale 400 --workers 64 --links 10 \
        --hidden 128,512 --wire-dtype "$dtype" --out "$out/w64-$dtype.json"
done
for dtype in bfloat16 float32; do
    dba3c bench scale --aggregation collective --time-scale 400 --workers 128 --links 10 \
        --hidden 128 --wire-dtype "$dtype" --out "$out/w128-$dtype.json"
done
