from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tiny_checkpoints import ARCHITECTURES, save_tiny_checkpoint  # noqa: E402


@pytest.fixture(scope="session", params=sorted(ARCHITECTURES))
def tiny_checkpoint(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    model = save_tiny_checkpoint(request.param, directory)
    return request.param, directory, model


@pytest.fixture(scope="session")
def smollm2_dir():
    """The real SmolLM2-135M-Instruct; `make test` pulls it first, elsewhere its tests skip."""
    from specroll.model.catalog import model_cache_dir, pulled_manifest

    if pulled_manifest("smollm2") is None:
        pytest.skip(f"smollm2 is not pulled into {model_cache_dir('smollm2')}: run `specroll models pull smollm2`")
    return model_cache_dir("smollm2")


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory):
    """A tiny Qwen2 whose sharpened logits make sampled text repetitive enough to draft."""
    directory = tmp_path_factory.mktemp("qwen2-sharp")
    save_tiny_checkpoint("qwen2", directory, logit_scale=30.0)
    return directory
