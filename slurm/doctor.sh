#!/bin/bash
# `dba3c doctor` on the nodes a job will get, before it spends node-hours: every rank reports
# its host, CPUs bound, MPI library, PMI, TensorFlow, oneDNN, thread pools, whether the game
# opens and the free disk under the run directory; rank 0 measures latency and bandwidth
# between itself and every other rank, prints one table and exits 0, or exits 1 with one
# `error:` line naming the first problem. Give it the node and task counts of the real job:
#
#   sbatch -N 69 -n 69 slurm/doctor.sh                   # before sbatch slurm/breakout_64.sh
#   sbatch -N 65 -n 65 slurm/doctor.sh                   # before the collective-mode run
#   DBA3C_OVERRIDES=env.id=pong sbatch -N 69 -n 69 slurm/doctor.sh   # before slurm/pong_64.sh
#   sbatch -N 3 -n 3 slurm/doctor.sh --timeout 30        # doctor options, then overrides
#
# Environment: the same as slurm/breakout_64.sh (DBA3C_HOME, DBA3C_CONFIG, DBA3C_RUN_DIR,
# DBA3C_VENV, DBA3C_MODULES, DBA3C_LAUNCHER, DBA3C_SRUN_MPI, DBA3C_CPUS_PER_TASK), so the
# ranks start exactly as the training job's would.
#
#SBATCH --job-name=dba3c-doctor
#SBATCH --nodes=69
#SBATCH --ntasks=69
#SBATCH --exclusive
#SBATCH --time=00:15:00
#SBATCH --output=dba3c-%x-%j.out

set -uo pipefail

DBA3C_CONFIG=${DBA3C_CONFIG:-configs/breakout_64.yaml}
DBA3C_LAUNCHER=${DBA3C_LAUNCHER:-srun}
# The checkout: DBA3C_HOME, else the one this script was submitted from, else the submission
# directory; slurm/lib.sh enters it and activates its environment.
submitted=$(scontrol show job "${SLURM_JOB_ID:-}" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
[[ -z ${DBA3C_HOME:-} && -f ${submitted:-} ]] && DBA3C_HOME=$(dirname "$submitted")/..
lib=${DBA3C_HOME:-${SLURM_SUBMIT_DIR:-.}}/slurm/lib.sh
[[ -f $lib ]] || { echo "error: no dba3c checkout here: $lib is missing (set DBA3C_HOME)" >&2; exit 2; }
# shellcheck source=slurm/lib.sh
source "$lib"

# The disk checked is the real job's run directory's file system.
ARGS=(--config "$DBA3C_CONFIG")
[[ -n ${DBA3C_RUN_DIR:-} ]] && ARGS+=("run.dir=$DBA3C_RUN_DIR")
# shellcheck disable=SC2206
ARGS+=(${DBA3C_OVERRIDES:-} "$@")
NTASKS=${SLURM_NTASKS:-1}
echo "dba3c: doctor, job ${SLURM_JOB_ID:-?}: $NTASKS tasks on ${SLURM_JOB_NUM_NODES:-?} nodes" \
     "(${SLURM_JOB_NODELIST:-?}), config $DBA3C_CONFIG"
[[ -n ${DBA3C_EMULATED_CLUSTER:-} ]] && echo "dba3c: emulated cluster ($DBA3C_EMULATED_CLUSTER):" \
    "MPIR_CVAR_NOLOCAL=${MPIR_CVAR_NOLOCAL:-} FI_PROVIDER=${FI_PROVIDER:-}"

case $DBA3C_LAUNCHER in
    srun)    # --mpi and --cpus-per-task that fit this site and allocation (or one error line)
             SRUN_OPTIONS=$(python3 -m dba3c.launchers.srun_options) || exit $?
             # shellcheck disable=SC2206
             launch=(srun $SRUN_OPTIONS --kill-on-bad-exit=1 --ntasks="$NTASKS") ;;
    mpiexec) launch=(mpiexec -n "$NTASKS") ;;
    *) echo "error: DBA3C_LAUNCHER=$DBA3C_LAUNCHER must be srun or mpiexec" >&2; exit 2 ;;
esac

"${launch[@]}" python3 -m dba3c doctor "${ARGS[@]}"
