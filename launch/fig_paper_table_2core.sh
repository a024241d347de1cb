#!/usr/bin/env bash
# docs/figures/paper_table_2core: the paper's six Table 3 games, each trained 15 minutes in
# one process with the A3C-FF one-node preset (configs/paper/<game>_1node.yaml) on a 2-core
# machine, then `dba3c evaluate` of each run's final checkpoint with the paper's protocol (50
# greedy games, 30 no-op starts) and `dba3c table` beside the paper's columns
# (docs/results.md, "The paper's Table 3 on 2 cores").
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

for game in pong breakout boxing seaquest space_invaders beam_rider; do
    dba3c train "configs/paper/${game}_1node.yaml" train.max_seconds=900 \
        "run.dir=runs/paper-2core/$game" run.progress=none
    dba3c evaluate "runs/paper-2core/$game" --episodes 50 > "runs/paper-2core/$game.final.json"
done
dba3c table runs/paper-2core/*/ --out docs/figures/paper_table_2core
