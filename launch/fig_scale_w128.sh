#!/usr/bin/env bash
# docs/figures/scale_w128: the paper's Figure 8 (efficiency against workers) redrawn to 128
# workers on the emulated cluster: ps aggregation at P = 4 and collective aggregation,
# overlapped and serial, over 10 and 100 Gb/s links, FC 128 (log 2026-11-27 Figure 8 to 128
# workers). Needs root, `ip netns` and about 16 GB of memory; about 75 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

out=bench/scale_w128
dba3c bench scale --aggregation ps --ps 4 --hidden 128 --time-scale 10 --out "$out/ps/scale.json"
for overlap in true false; do
    # 10 Gb/s at s = 200: a larger time scale keeps the emulating host's share of a step small
    dba3c bench scale --aggregation collective --hidden 128 --links 10 --time-scale 200 \
        "dist.collective_overlap=$overlap" --out "$out/collective-$overlap-10/scale.json"
    dba3c bench scale --aggregation collective --hidden 128 --links 100 --time-scale 100 \
        "dist.collective_overlap=$overlap" --out "$out/collective-$overlap-100/scale.json"
done
dba3c plot "$out"/*/scale.json --out docs/figures/scale_w128
