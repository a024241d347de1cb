#!/bin/bash
# The paper's 64-worker layout on Pong: slurm/breakout_64.sh with env.id=pong.
#   bash slurm/pong_64.sh [sbatch options]      e.g. bash slurm/pong_64.sh -N1 -n6
# Config overrides go in DBA3C_OVERRIDES; see slurm/breakout_64.sh for the environment.
exec sbatch --job-name=dba3c-pong64 \
    --export=ALL,DBA3C_OVERRIDES="env.id=pong eval.target_score=20 ${DBA3C_OVERRIDES:-}" \
    "$@" "$(dirname "$0")/breakout_64.sh"
