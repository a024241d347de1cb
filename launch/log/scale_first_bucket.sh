#!/usr/bin/env bash
# The first layer replicated against cut, emulated W = 64, staging not charged: three
# alternating pairs at FC 128 over 10 Gb/s, then FC 512 and 100 Gb/s replicated, three runs
# each, and both at twice the time scale (log 2026-11-27 the first layer replicated). Needs
# root and `ip netns`; about 50 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

extra=("$@")   # passed on to every run
w64() {
    dba3c bench scale --aggregation collective --workers 64 dist.overlap_cost=0 "$@" \
        ${extra[@]+"${extra[@]}"}
}
for run in 1 2 3; do
    for replicated in true false; do
        w64 --links 10 --hidden 128 --time-scale 200 "dist.replicate_first_bucket=$replicated" \
            --out "bench/first_bucket/$replicated-$run/scale.json"
    done
done
# replicated (the default); the last two at twice the time scale: half the host's share
for point in "10 512 200 fc512" "100 128 100 100gbit" "10 128 400 s400" "10 512 800 fc512-s800"; do
    read -r link hidden scale name <<< "$point"
    for run in 1 2 3; do
        w64 --links "$link" --hidden "$hidden" --time-scale "$scale" \
            --out "bench/first_bucket/$name-$run/scale.json"
    done
done
