#!/usr/bin/env bash
# `dba3c doctor` (docs/cluster.md, "Preflight: `dba3c doctor`"): the preflight alone, under the local
# mpiexec with 3 ranks, and on a 3-node emulated cluster with 1 Gbit/s links (root; the
# cluster is stopped at the end). Each ends with one table; exit 0, or 1 with one `error:`
# line naming the first problem. On a real cluster: sbatch -N 69 -n 69 slurm/doctor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c doctor
mpiexec -n 3 dba3c doctor --config configs/breakout_64.yaml

bash slurm/local-cluster.sh start --nodes 3 --link 1gbit
trap 'bash slurm/local-cluster.sh stop' EXIT
# shellcheck disable=SC2046
mpiexec $(bash slurm/local-cluster.sh mpiexec-args) -n 3 python -m dba3c doctor
mkdir -p runs
rc=0
sbatch --wait -N 3 -n 3 -o runs/doctor-emulated.out slurm/doctor.sh || rc=$?
cat runs/doctor-emulated.out
exit $rc
