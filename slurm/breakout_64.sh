#!/bin/bash
# The paper's best run (Adamski et al. 2018): 64 training workers (one per node, 12+ cores),
# 4 parameter servers and an evaluator; the chief (rank 0) is one of the 64 training workers.
# World size = 64 + 4 + 1 = 69 tasks. Roles come from the MPI rank (see `dba3c describe`).
#
#   sbatch slurm/breakout_64.sh                               # the full run
#   sbatch -N1 -n6 slurm/breakout_64.sh train.max_steps=3     # the same file at tiny scale
#   DBA3C_OVERRIDES="train.lr=5e-4 run.seed=3" sbatch slurm/breakout_64.sh
#   sbatch -N 65 -n 65 slurm/breakout_64.sh dist.aggregation=collective dist.ps=0
#                          # no parameter servers: 64 workers + the evaluator (docs/cluster.md)
#
# Command-line sbatch options override the #SBATCH lines; script arguments and
# DBA3C_OVERRIDES are config overrides (KEY=VALUE, applied after the preset).
#
# Environment (all optional):
#   DBA3C_HOME       the dba3c checkout (default: the one this script was submitted from,
#                    found through Slurm's record of it; else the submission directory)
#   DBA3C_CONFIG     preset                 (default: configs/breakout_64.yaml)
#   DBA3C_RUN_DIR    run directory          (default: runs/<job name>-<job id>; stable across
#                                            requeues, so a requeued job resumes)
#   DBA3C_VENV       Python environment to activate (default: the checkout's .venv if it
#                    exists; otherwise the python3 on PATH is used)
#   DBA3C_MODULES    modules to `module load` first, space separated (e.g. "openmpi/4.1"); an
#                    MPI among them is used by a venv installed without an MPI wheel (make
#                    install MPI=site) and refused beside a wheel (slurm/lib.sh, docs/cluster.md)
#   DBA3C_LAUNCHER   srun (default) or mpiexec (inside the allocation)
#   DBA3C_SRUN_MPI   srun's PMI plugin (default: the first of `srun --mpi=list` that the MPI
#                    library speaks: pmi2 for MPICH, pmix for Open MPI, cray_shasta for Cray)
#   DBA3C_CPUS_PER_TASK  CPUs each rank gets (default: all the allocation has per task; one
#                    rank per node: its node's), passed to srun so that neither --exact nor
#                    a shared node leaves a rank on one core
#   DBA3C_OVERRIDES  extra config overrides
#   DBA3C_OVERRIDES_FILE  a YAML file of config sections applied before them, e.g. the node
#                    settings of `sbatch slurm/tune.sh` (dba3c tune --write)
#
# The time limit is the preset's train.max_seconds (2 h) plus 10 minutes for start-up, the last
# evaluation and checkpoint; a job whose --time leaves less is warned at start (a run that
# misses its target would otherwise be stopped by the signal below and requeued).
#
# Preemption and time limits: Slurm sends SIGUSR2 to this script 120 s before the limit (or
# `scancel --signal=USR2 JOBID` at any time); it is forwarded to rank 0, which writes a
# checkpoint and stops every rank cleanly; the script then requeues the job, which resumes
# from the run directory's newest checkpoint with the same step count.
#
#SBATCH --job-name=dba3c-breakout64
#SBATCH --nodes=69
#SBATCH --ntasks=69
#SBATCH --exclusive
#SBATCH --time=02:10:00
#SBATCH --signal=B:USR2@120
#SBATCH --requeue
#SBATCH --open-mode=append
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
RUN_DIR=${DBA3C_RUN_DIR:-runs/${SLURM_JOB_NAME:-dba3c}-${SLURM_JOB_ID:-local}}

# shellcheck disable=SC2206
OVERRIDES=(dist.workers=0 "run.dir=$RUN_DIR" ${DBA3C_OVERRIDES:-} "$@")
if [[ -n ${DBA3C_OVERRIDES_FILE:-} ]]; then
    [[ -f $DBA3C_OVERRIDES_FILE ]] || { echo "error: DBA3C_OVERRIDES_FILE=$DBA3C_OVERRIDES_FILE" \
        "is not a file" >&2; exit 2; }
    OVERRIDES=(--overrides "$DBA3C_OVERRIDES_FILE" "${OVERRIDES[@]}")
fi
for o in "${OVERRIDES[@]}"; do [[ $o == run.dir=* ]] && RUN_DIR=${o#run.dir=}; done
NTASKS=${SLURM_NTASKS:-1}
echo "dba3c: job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}) $NTASKS tasks," \
     "config $DBA3C_CONFIG, run dir $RUN_DIR, overrides: ${OVERRIDES[*]}"

# On the emulated cluster of slurm/local-cluster.sh its TaskProlog keeps MPICH off shared
# memory, so ranks on different emulated nodes talk TCP through the shaped links.
[[ -n ${DBA3C_EMULATED_CLUSTER:-} ]] && echo "dba3c: emulated cluster ($DBA3C_EMULATED_CLUSTER):" \
    "MPIR_CVAR_NOLOCAL=${MPIR_CVAR_NOLOCAL:-} FI_PROVIDER=${FI_PROVIDER:-}"

# Refuse a layout the tasks cannot hold before any rank starts.
python3 -m dba3c.launchers.slurm_check "$DBA3C_CONFIG" "$NTASKS" "${OVERRIDES[@]}" || exit $?

case $DBA3C_LAUNCHER in
    srun)    # --mpi and --cpus-per-task that fit this site and allocation (or one error line)
             SRUN_OPTIONS=$(python3 -m dba3c.launchers.srun_options) || exit $?
             # shellcheck disable=SC2206
             launch=(srun $SRUN_OPTIONS --kill-on-bad-exit=1 --ntasks="$NTASKS"); stop_sig=USR2 ;;
    mpiexec) launch=(mpiexec -n "$NTASKS"); stop_sig=TERM  # MPICH's mpiexec dies on USR2;
             # Open MPI's ends the job on TERM without passing it on, and forwards USR2
             [[ $(mpiexec --version 2>&1) == *"Open MPI"* ]] && stop_sig=USR2 ;;
    *) echo "error: DBA3C_LAUNCHER=$DBA3C_LAUNCHER must be srun or mpiexec" >&2; exit 2 ;;
esac

signalled=0
on_usr2() {
    signalled=1
    echo "dba3c: SIGUSR2 received: checkpoint, stop and requeue"
    kill -"$stop_sig" "$child" 2>/dev/null  # forwarded to the ranks; rank 0 acts, others ignore it
}
trap on_usr2 USR2

"${launch[@]}" python3 -m dba3c train "$DBA3C_CONFIG" "${OVERRIDES[@]}" &
child=$!
rc=0
while true; do  # `wait` returns early when a trapped signal arrives; wait again
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break
done

# Requeue when the run stopped for a signal (here, or delivered to the ranks by
# `scancel --signal=USR2`), not when it finished. A task of a job array (slurm/paper_table.sh)
# is requeued alone, as ARRAY_TASK: one of its tasks has the array's own id as SLURM_JOB_ID,
# and requeueing that id would requeue every task, finished or running.
job=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}
job=${job:-${SLURM_JOB_ID:-}}
reason=$(python3 -c 'import sys; from dba3c.training.rundir import RunDir
print(RunDir(sys.argv[1]).read_summary().get("stop_reason") or "")' "$RUN_DIR" 2>/dev/null)
if [[ $rc == 0 && ( $signalled == 1 || $reason == signal* ) && -n $job ]]; then
    echo "dba3c: stopped by ${reason:-a signal}; requeueing job $job to resume from $RUN_DIR"
    scontrol requeue "$job"
fi
exit "$rc"
