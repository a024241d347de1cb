# The two set-up commands of the README: `make run` and `make test` (lint + tests).
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUN_DIR ?= runs/breakout
RUN_ARGS ?= train.max_seconds=240

.PHONY: install run lint test test-fast bench bench-quick clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# A single-node Breakout run with a live display (4 minutes of training, then the final
# evaluation), its curves, and a video of one greedy game (capped at 4500 frames).
run: $(STAMP)
	$(BIN)/dba3c train configs/breakout.yaml run.dir=$(RUN_DIR) $(RUN_ARGS)
	$(BIN)/dba3c plot $(RUN_DIR) --out $(RUN_DIR)/plots
	$(BIN)/dba3c evaluate $(RUN_DIR) --episodes 1 --video $(RUN_DIR)/game.mp4 \
		eval.max_frames=4500 >$(RUN_DIR)/game.json
	@echo "make run: curves in $(RUN_DIR)/plots, one greedy game in $(RUN_DIR)/game.mp4" \
		"(its score in $(RUN_DIR)/game.json); again: make run RUN_DIR=another"

lint: $(STAMP)  ## ruff (style, imports, bugbear, annotations) and mypy (types), whole package
	$(BIN)/ruff check .
	$(BIN)/mypy

# Two pytest workers: the Slurm and emulated-cluster tests (one cluster at a time, mostly
# waiting on the scheduler) beside all the others, one test at a time each (tests/conftest.py).
test: lint  ## lint, then the whole test suite (CI runs this; a lint failure fails it)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

test-fast: $(STAMP)  ## unit tests only (tests/unit: in-process, no subprocess)
	$(BIN)/python -m pytest -q tests/unit

bench: $(STAMP)  ## benchmark harness: bench/results.json (dba3c bench --log adds a new docs/log entry)
	$(BIN)/dba3c bench

bench-quick: $(STAMP)
	$(BIN)/dba3c bench --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
