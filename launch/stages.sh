#!/usr/bin/env bash
# The staged gradient's cost against the one-call gradient, per network (log 2026-11-27 staged
# hooks beside the compute): times and each stage's share of the step beside its share of the FLOPs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench stages --config configs/breakout.yaml
dba3c bench stages --config configs/pong_small.yaml
