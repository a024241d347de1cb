#!/usr/bin/env bash
# Two real paper-network ranks of one core each, collective mode over shared memory (nothing to
# hide): overlap off, on and chosen per run, three runs each (docs/benchmarks.md, current
# figures; log 2026-11-27 real ranks of one core each). About 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench real-ranks --ranks 2 --cores 1 --steps 60 --repeats 3 --modes off,on,auto "$@"
