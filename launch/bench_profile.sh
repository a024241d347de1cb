#!/usr/bin/env bash
# Where one worker's step goes, cheap network (docs/benchmarks.md; log 2026-11-23 profile and
# 2026-11-26 32 envs): ms per iteration of each section of the actor and trainer loops.
# Writes bench/profile.json and, with --log (passed on: launch/bench_profile.sh --log), a docs/log/ entry.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench profile --config configs/pong_small.yaml "$@"
