#!/usr/bin/env bash
# How much of its link a large bucket's reduce-scatter + allgather keeps busy on the emulated
# cluster: the last bucket of the paper network at FC 512 (822,277 floats) and FC 128
# (205,573), 8 and 16 ranks one per node, links at 25 Mbit/s (10 Gb/s at time scale 400),
# MPI's blocking wait against polls at 1 cap (the client's waits) and at 4 caps (its
# progress thread), recursive halving / doubling (log 2026-11-27 the FC 512 step). Needs
# root and `ip netns`; about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

trap 'slurm/local-cluster.sh stop >/dev/null' EXIT
mkdir -p bench/collective_link_share
for nodes in 8 16; do
    slurm/local-cluster.sh start --nodes "$nodes" --link 25mbit >/dev/null
    DBA3C_MPIEXEC_ARGS="$(slurm/local-cluster.sh mpiexec-args)"
    export DBA3C_MPIEXEC_ARGS
    for params in 822277 205573; do
        dba3c bench waiting --ranks "$nodes" --params "$params" --rounds 5 \
            --algorithm recursive --link-mbit 25 \
            --strategies block,quick-20000us,poll-80000us \
            > "bench/collective_link_share/w$nodes-$params.md" \
            2> >(tee "bench/collective_link_share/w$nodes-$params.jsonl" >&2)  # a point a line
    done
done
