#!/usr/bin/env bash
# Collective aggregation at W = 128 on the emulated cluster, overlapped at s = 200 and 400 and
# serial (log 2026-11-27 collective
# W = 128). Needs root, `ip netns` and about 16 GB of memory; 6-10 minutes each on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench scale --aggregation collective --workers 128 --time-scale 200 "$@"
dba3c bench scale --aggregation collective --workers 128 --time-scale 200 dist.collective_overlap=false "$@"
dba3c bench scale --aggregation collective --workers 128 --time-scale 400 "$@"
