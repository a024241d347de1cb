#!/usr/bin/env bash
# Gradients in bfloat16 on the wire beside float32 on the emulated cluster, collective
# aggregation over 10 Gb/s (log 2026-11-28 gradients in bfloat16 on the emulated cluster):
# W = 64 at FC 128 and 512 (and the grid's W = 64 straggler point), W = 128 at FC 128,
# bfloat16 and float32 alternating, RUNS pairs (default 2). float32's bytes put W = 64 at
# s = 400 and W = 128 at s = 200 (the host budget); bfloat16's fewer bytes would leave W = 64
# at s = 200, so its runs ask for s = 400 there. Needs root, `ip netns` and about 16 GB of
# memory; about 9 minutes a run on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

scale() {  # OUT OPTIONS...
    local out=$1; shift
    dba3c bench scale --aggregation collective --links 10 --hidden 128,512 "$@" \
        --out "bench/wire_dtype/$out.json"
}
for run in $(seq "${RUNS:-2}"); do
    scale "bfloat16-$run-w64" --wire-dtype bfloat16 --workers 64 --time-scale 400
    scale "bfloat16-$run-w128" --wire-dtype bfloat16 --workers 128 --time-scale 200
    scale "float32-$run" --wire-dtype float32 --workers 64,128 --time-scale 200
done
