#!/usr/bin/env bash
# Builds .venv-prime/: a virtual environment holding prime-rl's rollout client (PyPI `renderers`, whose
# renderers/client.py posts /inference/v1/generate) and nothing else, so tests/serve/test_prime_rl_client.py
# can drive `specroll serve` with prime-rl's own code. No torch: the client's text path needs none.
#
# Every package is pinned and installed without dependency resolution, so the environment is the same on
# every machine. renderers 0.1.12's client imports httpx, which its pinned openai (3.x, built on httpx2)
# no longer brings, so httpx is pinned here too.
# Idempotent: a second run that finds the same pins installed only re-checks the import.
#
# Usage: scripts/prime_client_env.sh [VENV_DIR]   (default: .venv-prime in the repository root)
# Python: $PRIME_PYTHON, else python3 (3.11 to 3.14, as renderers asks).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-prime}"

PINS=(
  renderers==0.1.12
  openai==3.63.0
  openai-harmony==0.0.8
  prime-pydantic-config==0.4.3
  tiktoken==0.14.0
  regex==2026.12.2
  requests==2.34.2
  urllib3==2.8.0
  charset-normalizer==3.5.3
  certifi==2026.10.19.post1
  idna==3.21
  Jinja2==3.1.6
  MarkupSafe==3.0.4
  numpy==2.4.6
  httpx==0.29.0
  httpcore==1.0.9
  httpx2==2.17.0
  httpcore2==2.17.0
  h11==0.16.0
  anyio==4.16.0
  sniffio==1.3.1
  jiter==0.19.0
  truststore==0.10.5
  pydantic==2.14.4
  pydantic_core==2.50.5
  annotated-types==0.8.0
  typing-inspection==0.4.5
  typing_extensions==4.16.0
)
CHECK='from renderers.client import generate; from renderers.base import ParsedResponse; import httpx, openai'

NAME="prime-rl's client"
WANT="$(printf '%s\n' "${PINS[@]}")"
source "$ROOT/scripts/client_env.sh"

PY="${PRIME_PYTHON:-python3}"
if ! "$PY" -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 15)' >/dev/null 2>&1; then
  echo "error: prime-rl's client (renderers) needs Python 3.11 to 3.14; $PY is not one." \
    "Set PRIME_PYTHON=/path/to/python3.11 (or newer)." >&2
  exit 1
fi
exit_if_current

new_env "$PY"
install_pins
finish_env
