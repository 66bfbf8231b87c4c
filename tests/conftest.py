from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
if not torch.cuda.is_available():  # the GPU's Triton kernels run in Triton's interpreter (tests/kernels)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from real_models import require_smollm2  # noqa: E402
from tiny_checkpoints import ARCHITECTURES, COMMON, save_tiny_checkpoint  # noqa: E402


@pytest.fixture(scope="session", params=sorted(ARCHITECTURES))
def tiny_checkpoint(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    model = save_tiny_checkpoint(request.param, directory)
    return request.param, directory, model


@pytest.fixture(scope="session")
def smollm2_dir():
    """The real SmolLM2-135M-Instruct (`require_smollm2`)."""
    return require_smollm2()


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory):
    """A tiny Qwen2 whose sharpened logits make sampled text repetitive enough to draft."""
    directory = tmp_path_factory.mktemp("qwen2-sharp")
    save_tiny_checkpoint("qwen2", directory, logit_scale=30.0)
    return directory


@pytest.fixture(scope="session")
def large_vocab_dir(tmp_path_factory):
    """A random Llama with SmolLM2's 49,152-token vocabulary (small elsewhere, to stay fast): the
    vocabulary on which fp rounding between forwards of different shapes changes sampled tokens."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**COMMON, "vocab_size": 49152}, tie_word_embeddings=False)
    directory = tmp_path_factory.mktemp("large-vocab")
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    return directory


@pytest.fixture
def one_thread():
    """One BLAS thread for the test, restored after: where every shape has a row-count-invariant
    regime (at two threads some shapes have none on some machines, and the probe refuses them), and
    much faster than two on a loaded two-core machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
