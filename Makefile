# specroll: `make demo` runs the default rollout, `make test` lints and runs the tests (both install
# first; the tests also pull the real model smollm2, once, into ~/.cache/specroll or $SPECROLL_HOME).
PYTHON ?= python3
PYTEST_ARGS ?= -q

.PHONY: install models demo bench lint test test-all

install:
	$(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e ".[test,models,train,trl,ray]"

models: install
	$(PYTHON) -m specroll.cli models pull smollm2

demo: install
	mkdir -p runs
	$(PYTHON) -m specroll.cli rollout --out runs/demo.jsonl

bench: install
	$(PYTHON) -m specroll.cli bench

lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

test: models lint
	$(PYTHON) -m pytest $(PYTEST_ARGS) -m "not slow"

test-all: models
	$(PYTHON) -m pytest $(PYTEST_ARGS)
