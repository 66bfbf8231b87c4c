# specroll: `make demo` runs the default rollout, `make test` lints and runs the tests (both install
# first; the tests also pull the real model smollm2, once, into ~/.cache/specroll or $SPECROLL_HOME).
PYTHON ?= python3
PYTEST_ARGS ?= -q

.PHONY: install models demo bench lint test test-all gpu-check

install:
	$(PYTHON) -m pip install -q torch==2.13.0
	$(PYTHON) -m pip install -q -e ".[test,models,train,trl,ray,serve]"

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

test: models lint skyrl-client
	$(PYTHON) -m pytest $(PYTEST_ARGS) -m "not slow"

# SkyRL's HTTP rollout client in its own Python 3.12 environment (.venv-skyrl/), for tests/serve
.PHONY: skyrl-client
skyrl-client:
	bash scripts/skyrl_client_env.sh

test-all: models
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# on a machine with a CUDA GPU: the GPU tests, then SmolLM2 in bf16 (CUDA graphs on, as by default
# there) against eager forwards, transformers' generate and the all-accepted bound at width 5 (oracle
# drafts, 4 a forward), and where a step's time goes at batch 64, 1 and 5 wide
gpu-check: models
	$(PYTHON) -m pytest $(PYTEST_ARGS) tests/gpu
	$(PYTHON) -m specroll.cli bench --device cuda --dtype bfloat16 --model smollm2 --task gsm8k \
		--num-prompts 16 --n 8 --max-tokens 256 --max-batch-size 128 --repeats 3 --fast-numerics \
		--systems plain,plain-eager,speculative,oracle:fixed-4,hf-generate
	$(PYTHON) benchmarks/step_trace.py --model smollm2 --device cuda --dtype bfloat16 --batch 64 --width 1
	$(PYTHON) benchmarks/step_trace.py --model smollm2 --device cuda --dtype bfloat16 --batch 64 --width 5
