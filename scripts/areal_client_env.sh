#!/usr/bin/env bash
# Builds .venv-areal/: a Python 3.11 virtual environment holding AReaL 1.0's remote inference engine
# (areal.engine.vllm_remote.RemotevLLMEngine over areal.infra.remote_inf_engine.RemoteInfEngine) and what
# it imports, so tests/serve/test_areal_client.py can drive `specroll serve` with AReaL's own client.
#
# torch is installed first (scripts/install_torch.sh: the local CPU wheel where there is one; the client
# module imports torch and torchdata), then areal without its dependencies (vLLM, SGLang, the agent SDKs,
# litellm: none of them imported by the client), then, pinned and also without dependency resolution,
# exactly what the client's imports reach: aiohttp, uvloop, transformers (AReaL's range, <= 5.3), Ray,
# hydra/omegaconf (AReaL's dev pins), numba, Flask, openai and their own small dependencies.
# Idempotent: a second run that finds the same pins installed only re-checks the import.
#
# Usage: scripts/areal_client_env.sh [VENV_DIR]   (default: .venv-areal in the repository root)
# Python: $AREAL_PYTHON, else python3.11 (pyenv's 3.11 first): AReaL asks 3.11 or 3.12, the CPU wheel is 3.11's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-areal}"

PINS=(
  areal==1.0.4
  aiofiles==25.1.0
  aiohappyeyeballs==2.7.1
  aiohttp==3.14.5
  aiosignal==1.4.0
  annotated-types==0.8.0
  antlr4-python3-runtime==4.9.3
  anyio==4.16.0
  attrs==26.1.0
  blinker==1.9.0
  certifi==2026.10.19.post1
  charset-normalizer==3.5.3
  click==8.5.1
  colorlog==6.12.0
  einops==0.8.2
  Flask==3.1.3
  frozenlist==1.8.0
  h11==0.16.0
  httpcore==1.0.9
  httpcore2==2.17.0
  httpx==0.29.0
  httpx2==2.17.0
  huggingface_hub==1.33.0
  hydra-core==1.4.0.dev1
  idna==3.21
  itsdangerous==2.2.0
  jiter==0.19.0
  jsonschema==4.26.0
  jsonschema-specifications==2025.9.1
  lark==1.3.1
  llvmlite==0.50.0
  msgpack==1.2.4
  multidict==7.2.1
  numba==0.68.1
  numpy==2.4.6
  omegaconf==2.4.0.dev2
  openai==3.63.0
  orjson==3.13.0
  packaging==26.4
  pillow==13.0.0
  propcache==0.5.4
  protobuf==7.36.2
  pydantic==2.14.4
  pydantic_core==2.50.5
  PyYAML==6.0.4
  ray==2.60.0
  referencing==0.37.0
  regex==2026.12.2
  requests==2.34.2
  rpds-py==2026.9.1
  safetensors==0.8.0
  sniffio==1.3.1
  tenacity==9.2.1
  tokenizers==0.22.2
  torchdata==0.11.0
  tqdm==4.70.1
  transformers==5.3.0
  truststore==0.10.5
  typing-inspection==0.4.5
  urllib3==2.8.0
  uvloop==0.23.0
  Werkzeug==3.1.9
  yarl==1.25.1
)
CHECK='from areal.engine.vllm_remote import RemotevLLMEngine; from areal.utils import name_resolve, names'

NAME="AReaL's client"
WANT="$(printf '%s\n' "${PINS[@]}")"
source "$ROOT/scripts/client_env.sh"
exit_if_current

PYENV="${PYENV_ROOT:-$HOME/.pyenv}"
if ! PY="$(python_of 3.11 "${AREAL_PYTHON:-}" "$PYENV"/versions/3.11*/bin/python3.11 /root/.pyenv/versions/3.11*/bin/python3.11 \
  "$(command -v python3.11 || true)" "$(command -v python3 || true)")"; then
  echo "error: AReaL's client needs Python 3.11 (tried \$AREAL_PYTHON, ~/.pyenv/versions/3.11*," \
    "python3.11 and python3 on PATH). Set AREAL_PYTHON=/path/to/python3.11." >&2
  exit 1
fi

new_env "$PY"
bash "$ROOT/scripts/install_torch.sh" "$VENV/bin/python"
install_pins
finish_env
