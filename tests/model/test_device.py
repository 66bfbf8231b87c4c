"""`--device` and `--dtype` resolution on this machine (a CPU build of torch, or no GPU)."""

from __future__ import annotations

import pytest
import torch

from specroll.model.device import resolve_cuda_graphs, resolve_device, torch_dtype
from specroll.placement import check_numerics, check_placement, is_batch_invariant


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
    check_numerics("cpu", batch_invariant=True)
    check_numerics("meta", batch_invariant=True)
    check_numerics("cuda", batch_invariant=False)
    with pytest.raises(ValueError, match="--fast-numerics"):
        check_numerics("cuda", batch_invariant=True)
    assert [is_batch_invariant("cpu", False), is_batch_invariant("cpu", True)] == [True, False]
    assert not is_batch_invariant("cuda", False)  # off the CPU the fast numerics run


def test_dtype_names_map_to_torch_and_unknown_ones_are_named():
    assert torch_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="'int8'"):
        torch_dtype("int8")


def test_cuda_graphs_follow_the_device_unless_asked():
    assert [resolve_cuda_graphs("auto", d) for d in ("cpu", "cuda")] == [False, True]
    assert resolve_cuda_graphs("on", "cpu") and not resolve_cuda_graphs("off", "cuda")
    with pytest.raises(ValueError, match="'yes'"):
        resolve_cuda_graphs("yes", "cpu")
