"""Real checkpoints for the tests: found in the model cache, or the test skips, except in CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def require_smollm2() -> Path:
    """The real SmolLM2-135M-Instruct's directory. `make test` pulls it first; elsewhere a test that
    needs it skips, but in CI (`CI` set) it fails: the real vocabulary's identity tests must run there."""
    from specroll.model.catalog import model_cache_dir, pulled_manifest

    if pulled_manifest("smollm2") is None:
        where = model_cache_dir("smollm2")
        reason = f"smollm2 is not pulled into {where}: run `specroll models pull smollm2`"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (in CI a real-model test may not skip: `make test` pulls it)")
        pytest.skip(reason)
    return model_cache_dir("smollm2")
