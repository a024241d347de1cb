#!/usr/bin/env bash
# Collective aggregation at W = 64 on the emulated cluster, overlapped (the default) and serial
# (docs/benchmarks.md, "Current figures", emulated table; log 2026-11-25 collective overlap).
# Needs root and `ip netns`; about 10 minutes each on 2 cores. --log (passed on) writes docs/log/ entries.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench scale --aggregation collective --workers 64 --time-scale 200 "$@"
dba3c bench scale --aggregation collective --workers 64 --time-scale 200 dist.collective_overlap=false "$@"
