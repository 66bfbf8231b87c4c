"""`--device` and `--dtype` resolution on this machine (a CPU build of torch, or no GPU)."""

from __future__ import annotations

import pytest
import torch

from specroll.model.device import check_numerics, resolve_device
from specroll.placement import check_placement


def test_auto_is_the_cpu_without_cuda_and_cuda_is_refused_with_the_reason():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")


def test_unknown_devices_and_dtypes_are_named():
    with pytest.raises(ValueError, match="'tpu'"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="'int8'"):
        check_placement("cpu", "int8", batch_invariant=False)
    with pytest.raises(ValueError, match="resolve 'auto'"):
        check_placement("auto", "float32", batch_invariant=False)
    check_placement("cuda", "bfloat16", batch_invariant=False)


def test_batch_invariant_numerics_are_refused_off_the_cpu():
    check_numerics(torch.device("cpu"), batch_invariant=True)
    check_numerics(torch.device("meta"), batch_invariant=True)
    check_numerics(torch.device("cuda"), batch_invariant=False)
    with pytest.raises(ValueError, match="--fast-numerics"):
        check_numerics(torch.device("cuda"), batch_invariant=True)
