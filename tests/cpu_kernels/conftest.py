from __future__ import annotations

import pytest
import torch

from specroll.cpu_kernels.build import load


@pytest.fixture(autouse=True)
def cpu_kernels():
    """Every test here needs the compiled kernels; a machine without AVX-512 or a compiler skips."""
    module, reason = load()
    if module is None:
        pytest.skip(f"specroll's CPU kernels cannot run here: {reason}")
    return module


@pytest.fixture
def threads():
    """Set the thread count for a test, restored after."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)
