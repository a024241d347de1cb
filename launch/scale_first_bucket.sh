#!/usr/bin/env bash
# The first layer replicated against cut, emulated W = 64, staging not charged: three
# alternating pairs at FC 128 over 10 Gb/s, then FC 512 and 100 Gb/s replicated, three runs
# each, and both at twice the time scale (log 2026-11-27 the first layer replicated). Needs
# root and `ip netns`; about 50 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

w64=(--scale --aggregation collective --workers 64 dist.overlap_cost=0)
for run in 1 2 3; do
    for replicated in true false; do
        dba3c bench "${w64[@]}" --links 10 --hidden 128 --time-scale 200 \
            "dist.replicate_first_bucket=$replicated" \
            --out "bench/first_bucket/$replicated-$run/scale.json" "$@"
    done
done
for run in 1 2 3; do
    dba3c bench "${w64[@]}" --links 10 --hidden 512 --time-scale 200 \
        --out "bench/first_bucket/fc512-$run/scale.json" "$@"
    dba3c bench "${w64[@]}" --links 100 --hidden 128 --time-scale 100 \
        --out "bench/first_bucket/100gbit-$run/scale.json" "$@"
done
# a larger time scale: half the emulating host's share of a step
for run in 1 2 3; do
    dba3c bench "${w64[@]}" --links 10 --hidden 128 --time-scale 400 \
        --out "bench/first_bucket/s400-$run/scale.json" "$@"
    dba3c bench "${w64[@]}" --links 10 --hidden 512 --time-scale 800 \
        --out "bench/first_bucket/fc512-s800-$run/scale.json" "$@"
done
