#!/usr/bin/env bash
# The paper's Table 3 on a cluster (docs/cluster.md, "Reproducing the paper's Table 3"): its six games x
# seeds 0-2 at the 64-node layout as one Slurm job array (slurm/paper_table.sh: 18 runs of 69
# nodes, each at most twice the paper's time), then the table beside the paper's and each
# game's seeds as a mean with a min-max band. Feeds no doc figure yet: no real-cluster run has
# been made. Extra arguments go to sbatch (e.g. --partition=..., --array=0-5).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

sbatch --wait "$@" slurm/paper_table.sh || echo "warning: a task of the array failed;" \
    "the table has the runs that there are" >&2
dba3c table runs/paper/*_64/seed* --out runs/paper/table
for game in runs/paper/*_64; do
    dba3c plot "$game"/seed* --out "runs/paper/figures/$(basename "$game")"
done
