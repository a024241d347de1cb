#!/usr/bin/env bash
# Collective aggregation at W = 64 on the emulated cluster, serial (dist.collective_overlap=false:
# no staging, so nothing to charge), over the grid's links (docs/benchmarks.md, "Current
# figures", the rows without staging; log 2026-11-25 collective overlap). The overlapped points
# are launch/scale_charged.sh's. Needs root and `ip netns`; about 10 minutes on 2 cores.
# --log (passed on) writes a docs/log/ entry.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench scale --aggregation collective --workers 64 --time-scale 200 dist.collective_overlap=false "$@"
