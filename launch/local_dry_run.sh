#!/usr/bin/env bash
# Local multi-process dry run on this machine (README, Quickstart): CartPole with
# 3 workers + 2 parameter servers, then the same without parameter servers (collective).
# Needs the installed mpiexec (the mpich wheel of `make run`); a few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c launch configs/cartpole.yaml --workers 3 --ps 2 run.dir=runs/cp3
dba3c launch configs/cartpole.yaml --workers 3 --ps 0 dist.aggregation=collective \
    run.dir=runs/cp3c
dba3c plot runs/cp3 runs/cp3c --out runs/cp3/plots
