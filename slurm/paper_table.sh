#!/bin/bash
# The paper's Table 3 (Adamski et al. 2018) on a cluster: one job array over its six games x
# seeds. Array task i trains game i mod G with run.seed = i div G (G games), one full
# 64-node run of configs/paper/<game>_64.yaml (64 workers, 4 parameter servers and an
# evaluator: 69 tasks) in its own run directory, runs/paper/<game>_64/seed<seed>:
#
#   sbatch slurm/paper_table.sh                    # 6 games x seeds 0-2 (--array=0-17)
#   sbatch --array=0-5 slurm/paper_table.sh        # each game once, seed 0
#   sbatch --array=18-29 slurm/paper_table.sh      # later: seeds 3 and 4
#   DBA3C_GAMES="pong boxing" sbatch --array=0-3 slurm/paper_table.sh   # two games, 2 seeds
#   sbatch -N1 -n6 --array=0-5 slurm/paper_table.sh train.max_steps=3   # tiny scale
#   dba3c table runs/paper/*_64/seed* --out runs/paper/table             # the table
#
# Each task is slurm/breakout_64.sh with its game's preset, seed and run directory, so it
# takes the same environment (DBA3C_HOME, DBA3C_VENV, DBA3C_MODULES, DBA3C_LAUNCHER, ...;
# script arguments and DBA3C_OVERRIDES are config overrides) and resumes the same way: on
# SIGUSR2, 120 s before the time limit, it checkpoints and requeues itself (that task
# only), and a task submitted again resumes its run directory's newest checkpoint.
#
# Environment, beside slurm/breakout_64.sh's (which DBA3C_CONFIG and DBA3C_RUN_DIR this
# script sets):
#   DBA3C_GAMES      the games, in order (default: the paper's six, as below)
#   DBA3C_TABLE_DIR  where the run directories go (default: runs/paper)
#
# The time limit is the longest preset's (Pong: 8 h) and a margin; a run ends sooner, at
# the paper's score or its own train.max_seconds. With a shorter --time a run checkpoints,
# requeues and goes on from there.
#
#SBATCH --job-name=dba3c-table
#SBATCH --array=0-17
#SBATCH --nodes=69
#SBATCH --ntasks=69
#SBATCH --exclusive
#SBATCH --time=08:30:00
#SBATCH --signal=B:USR2@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=dba3c-%x-%A_%a.out

set -uo pipefail

[[ -n ${SLURM_ARRAY_TASK_ID:-} ]] || {
    echo "error: not a Slurm array task: submit with sbatch (see the top of $0)" >&2; exit 2; }
read -r -a games <<< "${DBA3C_GAMES:-beam_rider breakout boxing pong seaquest space_invaders}"
game=${games[SLURM_ARRAY_TASK_ID % ${#games[@]}]}
seed=$((SLURM_ARRAY_TASK_ID / ${#games[@]}))
# The checkout: DBA3C_HOME, else the one this script was submitted from, else the submission
# directory (slurm/breakout_64.sh finds it the same way).
submitted=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
[[ -z ${DBA3C_HOME:-} && -f ${submitted:-} ]] && DBA3C_HOME=$(dirname "$submitted")/..
export DBA3C_HOME=${DBA3C_HOME:-${SLURM_SUBMIT_DIR:-.}}
export DBA3C_CONFIG=configs/paper/${game}_64.yaml
[[ -f $DBA3C_HOME/$DBA3C_CONFIG ]] || {
    echo "error: DBA3C_GAMES has $game, which has no preset $DBA3C_CONFIG" >&2; exit 2; }
export DBA3C_RUN_DIR=${DBA3C_TABLE_DIR:-runs/paper}/${game}_64/seed$seed
echo "dba3c: array task $SLURM_ARRAY_TASK_ID of job ${SLURM_ARRAY_JOB_ID:-?}: $game, seed $seed"
exec bash "$DBA3C_HOME/slurm/breakout_64.sh" "run.seed=$seed" "$@"
