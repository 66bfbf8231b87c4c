"""scripts/serve_conformance.py loaded as a module (scripts/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "serve_conformance.py"
RECORDING = Path(__file__).resolve().parent / "vllm_0.32.0_shapes.json"


def load():
    if "serve_conformance" not in sys.modules:
        spec = importlib.util.spec_from_file_location("serve_conformance", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["serve_conformance"] = module  # dataclasses look their module up by name
        spec.loader.exec_module(module)
    return sys.modules["serve_conformance"]
