#!/usr/bin/env bash
# The protocol at the paper's scale on one host (README, Quickstart): 16 synthetic-compute
# workers + 4 parameter servers of the breakout_64 preset, 100 steps, no TensorFlow.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c launch configs/breakout_64.yaml --workers 16 --ps 4 synthetic.enabled=true \
    eval.every=0 eval.rank=false train.max_steps=100 run.dir=runs/syn16
