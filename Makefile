# specroll: `make demo` runs the default rollout, `make test` runs the tests (both install first).
PYTHON ?= python3
PYTEST_ARGS ?= -q

.PHONY: install demo bench test test-all

install:
	$(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e ".[test]"

demo: install
	mkdir -p runs
	$(PYTHON) -m specroll.cli rollout --out runs/demo.jsonl

bench: install
	$(PYTHON) -m specroll.cli bench

test: install
	$(PYTHON) -m pytest $(PYTEST_ARGS) -m "not slow"

test-all: install
	$(PYTHON) -m pytest $(PYTEST_ARGS)
