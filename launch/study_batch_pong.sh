#!/usr/bin/env bash
# The optimizer study at the cluster's batch (issue "Learning at the cluster's batch"), Pong with
# configs/pong_small.yaml's network on one machine: one worker (the preset, mini-batch 64),
# 16 x 32 = 512 and 64 x 32 = 2048 data points a step (dist.emulate_workers), two seeds each;
# then, seed 0, Adam's epsilon 1e-8 (the paper's large-batch choice) at 64 and 2048, and with
# it the learning rate at 2048 scaled linearly (x32) and by the square root (x sqrt(32)), and
# at 2048 the cluster preset's Adam (the paper's). The one-worker preset also runs in bfloat16
# (model.precision), two seeds, beside its float32 seeds.
#
# Every run has the same budget in data points (BUDGET, 5 M; one run is then resumed to 20 M)
# and is evaluated every 192,000 data points (30 greedy games, stopped once they cannot
# average 18), and ends at greedy 18, or at the evaluation that finds a layer of its network
# dead (eval.stop_if_dead: no unit active on 800 frames of random play). A run killed
# (Ctrl-C, SIGTERM) resumes from its last checkpoint when this script runs again; a finished
# run (its summary.json says the target, a dead layer, or max_steps at its budget) is
# skipped. On a quiet 2-core machine a one-worker run reaches 18 in about 45 minutes; a run
# at 2048 that does not reach it trains its whole budget, about 65-90 minutes. `nice` leaves
# the machine to other work first.
#
# SLOTS=N SLOT=i runs only every N-th run from the i-th (0 .. N-1), so that N copies share
# the queue, each run in one of them: two on 2 cores trained 1,594 data points/s together
# against 1,234 for one alone (one-worker runs, 2026-11-29); on more cores, more. The
# figures at the end need every run and the node's rate a quiet machine: a slot stops
# before them, and this script run again without SLOTS (every run then done) draws them.
#
# Needs launch/scale_charged.sh's results (bench/charged) for the predicted Figure 8.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`
OUT=${OUT:-runs/study_batch_pong}
BUDGET=${BUDGET:-5000000}
EVAL_DP=192000
SLOTS=${SLOTS:-1} SLOT=${SLOT:-0} queued=0

finished() {  # the run in $1 ended at the target, dead, or at a budget of $2 steps or more
    python - "$1/summary.json" "$2" <<'EOF'
import json, sys
try:
    summary = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(1)
reason = summary.get("stop_reason") or ""
budget_done = reason.startswith("train.max_steps") and summary["final_step"] >= int(sys.argv[2])
ended = reason.startswith(("eval.target_score", "eval.stop_if_dead"))  # the target; a dead net
sys.exit(0 if budget_done or ended else 1)
EOF
}

run() {  # run NAME W SEED [KEY=VALUE ...]: W = 0 is the preset's one worker (mini-batch 64)
    queued=$((queued + 1))
    if [ $(( (queued - 1) % SLOTS )) -ne "$SLOT" ]; then return; fi  # another slot's
    local name=$1 w=$2 seed=$3; shift 3
    local dir=$OUT/$name/$name-s$seed batch=64 emulate=()  # a setting's seeds share a parent: one curve
    if [ "$w" -gt 0 ]; then batch=$((32 * w)); emulate=(dist.emulate_workers="$w" train.batch_size=32); fi
    local steps=$(( (BUDGET + batch - 1) / batch )) every=$(( (EVAL_DP + batch - 1) / batch ))
    if finished "$dir" "$steps"; then echo "done: $dir"; return; fi
    local ckpt=$(( every < 1000 ? every : 1000 ))
    echo "$(date -u +%FT%TZ) $dir: $steps steps of $batch data points"
    nice -n 19 dba3c train configs/pong_small.yaml "${emulate[@]}" run.dir="$dir" run.seed="$seed" \
        train.max_steps="$steps" train.max_seconds=0 eval.every="$every" \
        eval.stop_at_target=true run.checkpoint_every="$ckpt" run.progress=lines "$@"
}

# the most telling first. At 2048 with the single-node settings seed 0 had not learnt by 5 M:
# its policy still uniform after 2,442 Adam steps, and 96% of its parameters' sqrt(v) under
# Adam's epsilon 1e-3, which so scaled their steps down; the paper's large-batch epsilon (1e-8)
# did not make it learn either: 2,442 steps of about the learning rate are too few. The cluster
# preset's own Adam comes next (configs/breakout_64.yaml, the paper's best run: lr 1e-3, betas
# 0.8 / 0.75, epsilon 1e-8), then a larger rate at 2048 with epsilon 1e-8 (at 1e-3 epsilon,
# not the rate, would size its steps), and 512, the batch between.
run w64 64 0
run w64-eps1e-8 64 0 adam.epsilon=1e-8
run w1 0 0
run w64-paper-adam 64 0 train.lr=0.001 adam.beta1=0.8 adam.beta2=0.75 adam.epsilon=1e-8
# the square-root rate (run w64-eps1e-8-lr-sqrt 64 0 adam.epsilon=1e-8 train.lr=0.0079, 1.4e-3 x
# sqrt(2048 / 64)) was stopped at step 480 on 2026-11-29: no first-layer filter had had a
# gradient since step 282 or earlier (all 16 inactive on 800 frames of play), so its policy
# could no longer see the screen; it stays in the plots below as it is
run w16 16 0
# then linear scaling (short if its network dies: the evaluation that finds a dead layer
# ends it), the second seeds of the three batches (the study's table needs two each),
# epsilon 1e-8 at one worker, and the one-worker preset in bfloat16
run w64-eps1e-8-lr-linear 64 0 adam.epsilon=1e-8 train.lr=0.0448  # 1.4e-3 x 2048 / 64
run w1 0 1
run w64 64 1
run w16 16 1
run w1-eps1e-8 0 0 adam.epsilon=1e-8
run w1-bf16 0 0 model.precision=bfloat16
run w1-bf16 0 1 model.precision=bfloat16
# a third float32 seed at one worker: seed 1's curve went with the first machine's run
# directories (2026-11-29), and the bfloat16 seeds are compared with the float32 seeds' spread
run w1 0 2
# does 2048 learn given more updates? The cluster preset's Adam resumes to 20 M data points
# (9,766 updates; train.max_steps may change on a resume), about 4 hours here
BUDGET=20000000 run w64-paper-adam 64 0 train.lr=0.001 adam.beta1=0.8 adam.beta2=0.75 \
    adam.epsilon=1e-8
if [ "$SLOTS" -gt 1 ]; then  # the other slots may still train: no figures, no timing yet
    echo "slot $SLOT of $SLOTS done; when every slot is, run this again without SLOTS: figures"
    exit 0
fi
have() {  # every run directory named exists (with its metrics)
    for dir in "$@"; do [ -f "$OUT/$dir/metrics.jsonl" ] || return 1; done
}
tables_of() {  # tables_of "FIGURE..." FIGURE_DIR...: each directory's tables of those figures
    local figs=$1 fig dir; shift
    for fig in $figs; do for dir in "$@"; do echo "docs/figures/$dir/$fig.csv"; done; done
}
# Seed 0 of every setting but bfloat16 ran on the first machine (2026-11-26 to 29), whose run
# directories are gone: the tables of docs/figures/study_batch_pong and study_batch_pong_2048
# are their record (each run's rows; eval_vs_data_points.csv with each run's W), so those two
# figures are drawn again only where their runs' directories are here (a reproduction)
if have w1/w1-s0 w16/w16-s0 w64/w64-s0; then
    dba3c plot "$OUT"/w1/w1-s0 "$OUT"/w16/w16-s0 "$OUT"/w64/w64-s0 \
        --out docs/figures/study_batch_pong
fi
if have w64/w64-s0 w64-eps1e-8/w64-eps1e-8-s0 w64-eps1e-8-lr-sqrt/w64-eps1e-8-lr-sqrt-s0; then
    dba3c plot "$OUT"/w64/w64-s0 "$OUT"/w64-eps1e-8/* "$OUT"/w64-eps1e-8-lr-sqrt/* \
        "$OUT"/w64-paper-adam/* "$OUT"/w64-eps1e-8-lr-linear/* \
        --out docs/figures/study_batch_pong_2048   # Adam at 2048: epsilon and the learning rate
fi
# the second seeds of 512 and 2048 alone (2026-11-29: they ran on another machine, after the
# first one's run directories were lost)
dba3c plot "$OUT"/w16/w16-s1 "$OUT"/w64/w64-s1 --out docs/figures/study_batch_pong_seed1
# both seeds of each batch as one band, from the two figures' tables (their runs are named
# NAME-s<seed>)
mapfile -t tables < <(tables_of "eval_vs_data_points eval_vs_step online_vs_step" \
    study_batch_pong study_batch_pong_seed1)
dba3c plot "${tables[@]}" --out docs/figures/study_batch_pong_seeds
# the cluster preset's Adam at 2048 resumed to 20 M data points, beside the two seeds of the
# single-node Adam at 2048 (5 M each, from their tables)
dba3c plot "$OUT"/w64-paper-adam/w64-paper-adam-s0 "${tables[@]}" \
    --only 'w64-s*,w64-paper-adam-s0' --out docs/figures/study_batch_pong_2048_20m
# the one-worker runs of this machine, each its own curve (their settings differ), so the
# tables keep each run's rows; then with the first machine's seed 0 (from its table): the
# float32 seeds as one band against bfloat16's, and against epsilon 1e-8
dba3c plot "$OUT"/w1/w1-s2 "$OUT"/w1-bf16/w1-bf16-s0 "$OUT"/w1-eps1e-8/w1-eps1e-8-s0 \
    --out docs/figures/study_batch_pong_w1
dba3c plot "$OUT"/w1-bf16/w1-bf16-s1 --out docs/figures/study_batch_pong_w1_bf16_seed1
mapfile -t w1_tables < <(tables_of "eval_vs_data_points online_vs_step" \
    study_batch_pong study_batch_pong_w1 study_batch_pong_w1_bf16_seed1)
dba3c plot "${w1_tables[@]}" --only 'w1-s*,w1-bf16-*' --out docs/figures/pong_small_bfloat16
dba3c plot "${w1_tables[@]}" --only 'w1-s*,w1-eps1e-8-*' --out docs/figures/study_batch_pong_eps_w1
# the paper's Figure 8 predicted (docs/results.md): T(W) = D(32 W) / (W R E(W)), R one node's
# data points/s (`dba3c bench node`: one process of the preset, end to end, on this machine),
# E(W) the emulated cluster's charged efficiency (launch/scale_charged.sh: W = 16, 64, 128 at
# FC 128 over 10 Gb/s), at greedy 18 and at 10 (what the one-worker seed 0 reached by 5 M)
node=bench/node_pong_small.json
[ -f "$node" ] || dba3c bench node --config configs/pong_small.yaml --quick --out "$node"
# each setting's seeds from the tables that record them (the one-worker seeds 0 and 2, the
# 512 and 2048 seeds 0 and 1): its band
tmp=$(mktemp -d)
mapfile -t seeds < <(tables_of eval_vs_data_points \
    study_batch_pong study_batch_pong_seed1 study_batch_pong_w1)
for score in 18 10; do  # the figure and its table only (plot also redraws the curves)
    dba3c plot "${seeds[@]}" bench/charged/w*-fc128-10-*.json --only 'w1-s*,w16-s*,w64-s*' \
        --score "$score" --node-rate "$node" --out "$tmp/$score"
    for ext in png csv; do
        cp "$tmp/$score/figure8_predicted.$ext" \
            "docs/figures/study_batch_pong/figure8_predicted_$score.$ext"
    done
done
rm -r "$tmp"
