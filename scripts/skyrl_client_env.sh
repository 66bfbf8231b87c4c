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

works() { [ -n "$1" ] && "$1" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; }

find_python() {
  local candidate
  for candidate in "${SKYRL_PYTHON:-}" "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.12.1/bin/python3.12" \
    /root/.pyenv/versions/3.12.1/bin/python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
    "$(command -v python3.12 || true)"; do
    if works "$candidate"; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

STAMP="$VENV/.specroll-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] \
  && "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
  echo "skyrl client environment ready: $VENV"
  exit 0
fi

if ! PY="$(find_python)"; then
  echo "error: SkyRL's client needs Python 3.12, and none was found (tried \$SKYRL_PYTHON," \
    "~/.pyenv/versions/3.12*/bin/python3.12 and python3.12 on PATH)." >&2
  echo "Install one (e.g. 'pyenv install 3.12.1') or set SKYRL_PYTHON=/path/to/python3.12." >&2
  exit 1
fi

echo "building the skyrl client environment in $VENV with $PY"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${PINS[@]}"
if ! "$VENV/bin/python" -c "$CHECK"; then
  echo "error: RemoteInferenceClient does not import in $VENV" >&2
  exit 1
fi
printf '%s\n' "$WANT" >"$STAMP"
echo "skyrl client environment ready: $VENV"
