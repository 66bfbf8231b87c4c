# specroll: `make demo` runs the default rollout, `make test` lints and runs the tests (both install
# first; the tests also pull the real model smollm2, once, into ~/.cache/specroll or $SPECROLL_HOME).
PYTHON ?= python3
PYTEST_ARGS ?= -q

.PHONY: install models demo bench lint test test-all gpu-check


install:
	bash scripts/install_torch.sh $(PYTHON)  # a local wheel, else PyTorch's CPU index without a GPU; TORCH_INDEX= for PyPI
	$(PYTHON) -m pip install -q -e ".[test,models,train,trl,ray,serve,gpu]"
	$(PYTHON) -m specroll.cpu_kernels  # compiles the CPU kernels once (cached), or says why not

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

test: models lint skyrl-client prime-client verl-env areal-client
	$(PYTHON) -m pytest $(PYTEST_ARGS) -m "not slow"

# SkyRL's HTTP rollout client in its own Python 3.12 environment (.venv-skyrl/), for tests/serve
.PHONY: skyrl-client
skyrl-client:
	bash scripts/skyrl_client_env.sh

# prime-rl's rollout client (PyPI renderers) in its own environment (.venv-prime/), for tests/serve;
# tests/serve/test_prime_rl_client.py skips without it
.PHONY: prime-client
prime-client:
	bash scripts/prime_client_env.sh

# AReaL 1.0's remote inference engine (RemotevLLMEngine) in its own environment (.venv-areal/), for
# tests/serve/test_areal_client.py; it skips without it
.PHONY: areal-client
areal-client:
	bash scripts/areal_client_env.sh

# verl 0.9.1's rollout classes, Ray and this checkout's specroll in their own environment (.venv-verl/), for
# tests/integrations/test_verl.py (verl's own LLMServerManager and client on specroll's verl backend); skips without it
.PHONY: verl-env
verl-env:
	bash scripts/verl_env.sh

# vLLM's CPU build in its own environment (.venv-vllm/), the peer of `specroll bench --systems vllm,...`;
# not part of `make test`: the bench's vLLM tests skip without it
.PHONY: vllm-peer
vllm-peer:
	bash scripts/vllm_peer_env.sh

test-all: models
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# on a bare machine with a CUDA GPU, offline, within ten minutes: installs and downloads nothing
# (scripts/gpu_check.py: a model of SmolLM2's shape built there, the GPU tests, bench, step traces);
# results in $OUT or runs/gpu-check; PARTS=bench-64,trace reruns parts; --smoke runs it on a CPU
gpu-check:
	$(PYTHON) scripts/gpu_check.py
