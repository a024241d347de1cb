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

run: $(STAMP)  ## short single-node Breakout training run with a live progress display
	$(BIN)/dba3c train configs/breakout.yaml run.dir=$(RUN_DIR) $(RUN_ARGS)

lint: $(STAMP)  ## ruff (style, imports, bugbear, annotations) and mypy (types), whole package
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint  ## lint, then the whole test suite (CI runs this; a lint failure fails it)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)  ## unit tests only (tests/unit: in-process, no subprocess)
	$(BIN)/python -m pytest -q tests/unit

bench: $(STAMP)  ## benchmark harness: bench/results.json (dba3c bench --log adds a new docs/log entry)
	$(BIN)/dba3c bench

bench-quick: $(STAMP)
	$(BIN)/dba3c bench --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
