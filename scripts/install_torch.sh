#!/usr/bin/env bash
# Installs torch 2.13.0 for `make install`, taking the first source that has it:
#   1. already installed at that version: nothing to do;
#   2. the CPU build in pip's local find-links (a machine image that ships it), its dependencies
#      from the configured indexes;
#   3. PyTorch's CPU index on a machine without `nvidia-smi` (PyPI's Linux wheel is the CUDA build,
#      gigabytes more), PyPI elsewhere, or wherever TORCH_INDEX says (empty: PyPI).
# Usage: scripts/install_torch.sh [PYTHON]
set -euo pipefail
PY="${1:-python3}"
VERSION="2.13.0"
if "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$VERSION')" 2>/dev/null; then
  exit 0
fi
if "$PY" -m pip install -q "torch==$VERSION+cpu" 2>/dev/null; then
  exit 0
fi
if [ -z "${TORCH_INDEX+set}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then TORCH_INDEX=""; else TORCH_INDEX="https://download.pytorch.org/whl/cpu"; fi
fi
"$PY" -m pip install -q "torch==$VERSION" ${TORCH_INDEX:+--index-url "$TORCH_INDEX"}
