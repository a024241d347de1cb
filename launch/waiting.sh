#!/usr/bin/env bash
# What waiting in a collective costs: polls with sleeps of 500, 50, 20, 10 us and the quick
# policy against MPI's blocking wait, on 2-8 local ranks (log 2026-11-25 waiting again; the
# default dist.collective_poll_us). On the emulated cluster: export DBA3C_MPIEXEC_ARGS first.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"   # `dba3c` from `make run` / `make test`

dba3c bench waiting --ranks 2,4,8 --rounds 50
dba3c bench waiting --ranks 2,4 --strategies poll-50us,quick-50us,block
