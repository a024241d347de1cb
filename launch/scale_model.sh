#!/usr/bin/env bash
# The analytic model's predictions for collective aggregation at W = 64, serial and overlapped
# (the first bucket cut and replicated), poll caps of 50 and 20 us (docs/benchmarks.md,
# "Model: collective aggregation that overlaps"); then the overlapped step at FC 128 and 512
# when the collectives' bytes get only a share of the link (log 2026-11-27 the FC 512 step).
# Pure arithmetic: no MPI, no TensorFlow, under a second.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

PYTHONPATH=. python - <<'PY'
from dba3c.benchmarks.scale.grid import ScalePoint
from dba3c.benchmarks.scale.model import model_step_seconds, net_buckets
from dba3c.learning.models import NetSpec
spec = NetSpec("ba3c", 128, (4, 84, 84), 6)
n, buckets, tc = spec.layout().num_params, net_buckets(spec), 0.0128
for gbit, s in ((10, 10), (100, 50)):
    for poll_us in (50, 20):
        for overlap, replicated in ((False, False), (True, False), (True, True)):
            point = ScalePoint(64, 0, link_gbit=gbit, aggregation="collective", overlap=overlap)
            step = model_step_seconds(point, n, tc, s, poll_s=poll_us * 1e-6, buckets=buckets,
                                      replicated_first=replicated)
            mode = ("overlapped, first bucket replicated" if replicated else
                    "overlapped" if overlap else "serial")
            print(f"{gbit} Gb/s, {poll_us} us polls, {mode}: {1e3 * step:.2f} ms, "
                  f"E {tc / step:.3f}")
PY

PYTHONPATH=. python - <<'PY'
from dba3c.benchmarks.scale.model import (ADAM_S_PER_PARAM, net_buckets, overlap_stages,
                                          overlapped_step_seconds)
from dba3c.learning.models import NetSpec
tc, s = 0.0128, 400
for hidden in (128, 512):
    spec = NetSpec("ba3c", hidden, (4, 84, 84), 6)
    n, buckets = spec.layout().num_params, net_buckets(spec)
    for share in (1.0, 0.74, 0.71, 0.55):  # 1.0: the model; the rest measured
        stages = overlap_stages(buckets, 64, tc, 10e9 / 8 * share, "recursive", 50e-6, True)
        step = overlapped_step_seconds(stages, ADAM_S_PER_PARAM * n / 64 / s)
        print(f"FC {hidden}, 10 Gb/s, link share {share:g}: {1e3 * step:.2f} ms, "
              f"E {tc / step:.3f}")
PY
