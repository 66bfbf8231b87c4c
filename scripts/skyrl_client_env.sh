#!/usr/bin/env bash
# Builds .venv-skyrl/: a Python 3.12 virtual environment holding SkyRL's HTTP rollout client
# (skyrl.backends.skyrl_train.inference_servers.remote_inference_client.RemoteInferenceClient) and
# nothing else, so tests/serve/test_skyrl_client.py can drive `specroll serve` with SkyRL's own code.
#
# skyrl is installed without its dependencies (torch, vLLM, transformers, ...): the client module needs
# only aiohttp and pydantic, pinned below with their own small dependencies. skyrl 0.3.0 is the newest
# release whose client imports without torch (0.4.0's imports torch through its MoE routing helpers, and
# needs Python 3.12: under 3.11 pydantic refuses its typing.TypedDict models; the CPU torch wheel here is
# 3.11's, and PyPI's Linux torch for 3.12 is the CUDA build).
# Idempotent: a second run that finds the same pins installed only re-checks the import.
#
# Usage: scripts/skyrl_client_env.sh [VENV_DIR]   (default: .venv-skyrl in the repository root)
# Python: $SKYRL_PYTHON, else pyenv's 3.12.1, else any pyenv 3.12, else python3.12 on PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-skyrl}"

PINS=(
  skyrl==0.3.0
  aiohttp==3.14.5
  aiohappyeyeballs==2.7.1
  aiosignal==1.4.0
  attrs==26.1.0
  frozenlist==1.8.0
  multidict==7.2.1
  propcache==0.5.4
  yarl==1.25.1
  idna==3.20
  pydantic==2.14.4
  pydantic_core==2.50.5
  annotated-types==0.8.0
  typing-inspection==0.4.5
  typing_extensions==4.16.0
)
CHECK='from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient'

NAME="SkyRL's client"
WANT="$(printf '%s\n' "${PINS[@]}")"
source "$ROOT/scripts/client_env.sh"
exit_if_current

PYENV="${PYENV_ROOT:-$HOME/.pyenv}"
if ! PY="$(python_of 3.12 "${SKYRL_PYTHON:-}" "$PYENV/versions/3.12.1/bin/python3.12" \
  /root/.pyenv/versions/3.12.1/bin/python3.12 "$PYENV"/versions/3.12*/bin/python3.12 \
  "$(command -v python3.12 || true)")"; then
  echo "error: SkyRL's client needs Python 3.12, and none was found (tried \$SKYRL_PYTHON," \
    "~/.pyenv/versions/3.12*/bin/python3.12 and python3.12 on PATH)." >&2
  echo "Install one (e.g. 'pyenv install 3.12.1') or set SKYRL_PYTHON=/path/to/python3.12." >&2
  exit 1
fi

new_env "$PY"
install_pins
finish_env
