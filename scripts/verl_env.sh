#!/usr/bin/env bash
# Builds .venv-verl/: a Python 3.11 virtual environment holding verl 0.9.1's rollout classes (its replica
# registry, `RolloutReplica`, `LLMServerManager`, `LLMServerClient`, its global load balancer, `BaseRollout`)
# and Ray, with this checkout's specroll on the path, so tests/integrations/test_verl.py runs verl's own
# agent-loop client against specroll's verl backend (`specroll.integrations.verl`).
#
# torch is installed first (scripts/install_torch.sh: the local CPU wheel where there is one), then verl
# without its dependencies (vLLM, SGLang, flash-attn, Megatron: GPU stacks the rollout classes do not
# import), then, pinned and also without dependency resolution, exactly what those classes import:
# Ray, omegaconf, tensordict, transformers (verl's range, < 5.11), pydantic, FastAPI (its router module),
# and their own small dependencies. specroll itself comes from this checkout (a .pth file), not a copy.
# Idempotent: a second run that finds the same pins installed only re-checks the import.
#
# Usage: scripts/verl_env.sh [VENV_DIR]   (default: .venv-verl in the repository root)
# Python: $VERL_PYTHON, else python3.11 (pyenv's 3.11 first): verl asks 3.10 to 3.12, the CPU wheel is 3.11's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-verl}"

PINS=(
  verl==0.9.1
  annotated-doc==0.0.7
  annotated-types==0.8.0
  antlr4-python3-runtime==4.9.3
  anyio==4.16.0
  attrs==26.1.0
  cachetools==8.0.3
  certifi==2026.10.19.post1
  charset-normalizer==3.5.3
  click==8.5.1
  cloudpickle==3.1.3
  codetiming==1.4.0
  fastapi==0.165.0
  h11==0.16.0
  hf-xet==1.8.0
  httpcore==1.0.9
  httpcore2==2.17.0
  httpx==0.29.0
  httpx2==2.17.0
  huggingface_hub==1.33.0
  hydra-core==1.3.8
  idna==3.21
  importlib_metadata==10.2.0
  jsonschema==4.26.0
  jsonschema-specifications==2025.9.1
  markdown-it-py==4.3.0
  mdurl==0.1.2
  msgpack==1.2.4
  numpy==2.4.6
  omegaconf==2.4.0
  opentelemetry-api==1.45.3
  orjson==3.13.0
  packaging==26.4
  protobuf==7.36.2
  pydantic==2.14.4
  pydantic_core==2.50.5
  Pygments==2.21.0
  pyvers==0.2.3
  PyYAML==6.0.4
  ray==2.60.0
  referencing==0.37.0
  regex==2026.12.2
  requests==2.34.2
  rich==15.0.0
  rpds-py==2026.9.1
  safetensors==0.8.0
  sniffio==1.3.1
  starlette==1.10.0
  tensordict==0.10.0
  tokenizers==0.22.2
  tqdm==4.70.1
  transformers==5.10.4
  truststore==0.10.5
  typing-inspection==0.4.5
  urllib3==2.8.0
  uvicorn==0.55.0
  zipp==4.1.2
)
CHECK='import torch, ray, hydra.utils; from verl.workers.rollout.llm_server import LLMServerManager; import specroll.integrations.verl'

NAME="verl's rollout classes"
WANT="$(printf '%s\n' "${PINS[@]}" "$ROOT")"
source "$ROOT/scripts/client_env.sh"
exit_if_current

PYENV="${PYENV_ROOT:-$HOME/.pyenv}"
if ! PY="$(python_of 3.11 "${VERL_PYTHON:-}" "$PYENV"/versions/3.11*/bin/python3.11 /root/.pyenv/versions/3.11*/bin/python3.11 \
  "$(command -v python3.11 || true)" "$(command -v python3 || true)")"; then
  echo "error: verl's environment needs Python 3.11 (tried \$VERL_PYTHON, ~/.pyenv/versions/3.11*," \
    "python3.11 and python3 on PATH). Set VERL_PYTHON=/path/to/python3.11." >&2
  exit 1
fi

new_env "$PY"
bash "$ROOT/scripts/install_torch.sh" "$VENV/bin/python"
install_pins
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$ROOT" >"$SITE/specroll-checkout.pth"  # this checkout's specroll, not a copy
finish_env
