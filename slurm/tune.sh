#!/bin/bash
# Tune one compute node of the partition the real job will use: `dba3c tune` measures the
# fastest simulators, batch size and thread pools of one process there and writes them (node
# settings only, no layout key) as an overrides file that any preset takes:
#
#   sbatch -p PARTITION slurm/tune.sh                      # -> node-<preset>.yaml
#   DBA3C_OVERRIDES_FILE=node-breakout.yaml sbatch -p PARTITION slurm/breakout_64.sh
#
# Environment (all optional): DBA3C_CONFIG (default configs/breakout.yaml: the one-process
# preset whose node settings the 64-node preset shares), DBA3C_TUNE_SECONDS (default 600),
# DBA3C_TUNE_OUT (default node-<preset>.yaml in the checkout; an existing file is kept and
# the job fails), DBA3C_HOME and DBA3C_VENV as in slurm/breakout_64.sh. Trials resume from
# runs/tune/ when the job is run again.
#
#SBATCH --job-name=dba3c-tune
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --exclusive
#SBATCH --time=00:30:00
#SBATCH --output=dba3c-%x-%j.out

set -uo pipefail

# The checkout: DBA3C_HOME, else the one this script was submitted from, else the submission
# directory; slurm/lib.sh enters it and activates its environment.
submitted=$(scontrol show job "${SLURM_JOB_ID:-}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
[[ -z ${DBA3C_HOME:-} && -f ${submitted:-} ]] && DBA3C_HOME=$(dirname "$submitted")/..
lib=${DBA3C_HOME:-${SLURM_SUBMIT_DIR:-.}}/slurm/lib.sh
[[ -f $lib ]] || { echo "error: no dba3c checkout here: $lib is missing (set DBA3C_HOME)" >&2; exit 2; }
# shellcheck source=slurm/lib.sh
source "$lib"

DBA3C_CONFIG=${DBA3C_CONFIG:-configs/breakout.yaml}
OUT=${DBA3C_TUNE_OUT:-node-$(basename "$DBA3C_CONFIG" .yaml).yaml}
# Settings tuned on a part of a node would be wrong for the whole node the real job gets: a
# job without --exclusive may hold only the CPUs it asked for (one, by default).
node=${SLURMD_NODENAME:-$(hostname -s)}
node_cpus=$(scontrol show node "$node" -o 2>/dev/null | sed -n 's/.* CPUTot=\([0-9]*\).*/\1/p')
if [[ -n $node_cpus && -n ${SLURM_CPUS_ON_NODE:-} && $SLURM_CPUS_ON_NODE -lt $node_cpus ]]; then
    echo "error: this job holds $SLURM_CPUS_ON_NODE of $node's $node_cpus CPUs; tuned settings" \
        "would fit that part, not the node: submit with --exclusive (the script's default)" \
        "or --cpus-per-task=$node_cpus" >&2
    exit 2
fi
echo "dba3c: tuning $DBA3C_CONFIG on $(hostname) for ${DBA3C_TUNE_SECONDS:-600} s -> $OUT"
# one task of the whole node: the search sizes its candidates from the CPUs it is bound to
exec srun --ntasks=1 --cpus-per-task="${SLURM_CPUS_ON_NODE:-1}" \
    python3 -m dba3c tune "$DBA3C_CONFIG" --seconds "${DBA3C_TUNE_SECONDS:-600}" \
    --write "$OUT" "$@"
