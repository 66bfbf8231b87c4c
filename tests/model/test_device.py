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


def test_batch_invariant_numerics_follow_the_device(monkeypatch):
    """The CPU's probed BLAS on the CPU, Triton's kernels on a GPU, on by default on both; a GPU
    without Triton refuses them by name; another device has none."""
    import importlib.util

    from specroll.placement import invariant_kernels

    assert [invariant_kernels("cpu"), invariant_kernels("meta"), invariant_kernels("cuda")] == [
        "probed",
        "probed",
        "triton",
    ]
    with pytest.raises(ValueError, match="no kernels for mps"):
        invariant_kernels("mps")
    check_numerics("cpu", batch_invariant=True)
    check_numerics("cuda", batch_invariant=False)
    real_find_spec = importlib.util.find_spec
    without_triton = lambda name, *a: None if name == "triton" else real_find_spec(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", without_triton)
    with pytest.raises(ValueError, match=r"specroll\[gpu\].*--fast-numerics"):
        check_numerics("cuda", batch_invariant=True)
    check_numerics("cpu", batch_invariant=True)  # the CPU's kernels need no Triton
    assert [is_batch_invariant("cpu", False), is_batch_invariant("cpu", True)] == [True, False]
    assert [is_batch_invariant("cuda", False), is_batch_invariant("cuda", True)] == [True, False]


def test_dtype_names_map_to_torch_and_unknown_ones_are_named():
    assert torch_dtype("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError, match="'int8'"):
        torch_dtype("int8")


def test_cuda_graphs_follow_the_device_unless_asked():
    assert [resolve_cuda_graphs("auto", d) for d in ("cpu", "cuda")] == [False, True]
    assert resolve_cuda_graphs("on", "cpu") and not resolve_cuda_graphs("off", "cuda")
    with pytest.raises(ValueError, match="'yes'"):
        resolve_cuda_graphs("yes", "cpu")
