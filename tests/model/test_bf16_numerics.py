"""bf16 on the CPU, part by part: the row-count probe in 16-bit dtypes, weights packed for oneDNN,
attention in fp32, torch's math attention where its fused kernel would fail, and `--dtype auto`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specroll.model import batch_invariant, packed_linear
from specroll.model.batch_invariant import block_attention, invariant_query_rows, invariant_row_sizes
from specroll.model.cpu_attention import flash_would_fail
from specroll.model.device import BF16_MIN_PARAMETERS, resolve_dtype
from specroll.model.transformer import Linear, grouped_attention

needs_packing = pytest.mark.skipif(
    not packed_linear.can_pack(torch.bfloat16, "cpu"), reason="oneDNN packs no bf16 weights on this CPU"
)
SMOLLM2_SHAPES = [(576, 576), (576, 192), (576, 1536), (1536, 576)]


class OneRowSumsInHalves:
    """F.linear as a 16-bit kernel whose one-row calls add K's two halves apart in fp32, and whose
    other calls sum in fp64 (the same bits at any row count), before the one rounding to bf16: a
    difference visible in a bf16 output only near a rounding boundary (on random operands the
    first row agrees; about one row in ten does not)."""

    @staticmethod
    def linear(x, weight, bias=None):
        if x.shape[0] != 1:
            return (x.double() @ weight.double().T).to(x.dtype)
        half = x.shape[1] // 2
        low = x[:, :half].float() @ weight[:, :half].float().T
        return (low + x[:, half:].float() @ weight[:, half:].float().T).to(x.dtype)


def test_the_16_bit_probe_finds_an_order_of_addition_that_rounding_hides(monkeypatch, one_thread):
    monkeypatch.setattr(batch_invariant, "F", OneRowSumsInHalves)
    invariant_row_sizes.cache_clear()
    try:
        sizes = invariant_row_sizes(1536, 576, torch.get_num_threads(), torch.bfloat16)
    finally:
        invariant_row_sizes.cache_clear()
    assert sizes[0] == 2 and sizes[-1] == 256


@needs_packing
@pytest.mark.parametrize("shape", SMOLLM2_SHAPES)
def test_packed_calls_are_f_linears_bits_at_every_served_size(shape, one_thread):
    """What lets the trainer's F.linear compute the engine's packed log-probabilities to the bit."""
    sizes = invariant_row_sizes(*shape, torch.get_num_threads(), torch.bfloat16, False, packed=True)
    weight = (torch.randn(shape[1], shape[0]) * 0.05).bfloat16()
    x = (torch.randn(300, shape[0]) * torch.rand(300, 1)).bfloat16()
    packed = packed_linear.pack(weight)
    for m in (*sizes[:6], sizes[-1]):
        assert torch.equal(packed_linear.linear(x[:m], packed, None), F.linear(x[:m], weight)), m


@needs_packing
def test_a_packed_layer_follows_its_weight_and_gives_gradients_through_f_linear():
    linear = Linear(64, 32, bias=True).to(torch.bfloat16)
    linear.packs = True
    x = torch.randn(3, 64).bfloat16()
    with torch.no_grad():
        first = linear(x)
        linear.weight.mul_(2)  # new weights in place, as `ModelRunner.load_weights` copies them
        second = linear(x)
    assert torch.equal(first, F.linear(x, linear.weight / 2, linear.bias))
    assert torch.equal(second, F.linear(x, linear.weight, linear.bias))  # repacked, not stale
    out = linear(x)  # a gradient asked for: F.linear, which autograd differentiates
    out.sum().backward()
    assert linear.weight.grad is not None and torch.equal(out.detach(), second)


def test_bf16_attention_is_fp32_attention_rounded_once(one_thread):
    b, H, Hkv, T, D, L = 2, 6, 2, 3, 32, 128
    q, keys, values = torch.randn(b, H, T, D), torch.randn(b, Hkv, L, D), torch.randn(b, Hkv, L, D)
    mask = torch.ones(b, 1, T, L, dtype=torch.bool)
    mask[..., 100:] = False
    q, keys, values = q.bfloat16(), keys.bfloat16(), values.bfloat16()
    rows = invariant_query_rows(D, torch.get_num_threads())
    out = block_attention(q, keys, values, mask, rows)
    wide = block_attention(q.float(), keys.float(), values.float(), mask, rows)
    assert out.dtype == torch.bfloat16 and torch.equal(out, wide.to(torch.bfloat16))


@pytest.mark.parametrize(
    "dtype, flags, capability, fails",
    [
        (torch.bfloat16, {"amx_tile", "amx_bf16", "avx512f"}, "AVX2", True),  # specroll's pin on an AMX Xeon
        (torch.float16, {"amx_tile", "amx_fp16"}, "AVX2", True),
        (torch.bfloat16, {"amx_tile", "amx_bf16"}, "AVX512", False),  # its AVX-512 kernels pack
        (torch.bfloat16, {"amx_tile", "amx_bf16"}, "AVX512_BF16", False),
        (torch.bfloat16, {"avx512f", "avx512_bf16"}, "AVX2", False),  # no AMX: nothing to pack
        (torch.float32, {"amx_tile", "amx_bf16"}, "AVX2", False),  # fp32 packs nothing
    ],
)
def test_flash_attention_fails_only_with_amx_below_avx512_kernels(dtype, flags, capability, fails):
    assert flash_would_fail(dtype, frozenset(flags), capability) == fails


def test_where_flash_would_fail_bf16_attention_runs_the_math_kernel_forward_and_back(monkeypatch):
    """The trainer's backward reaches torch's attention in bf16 (`recomputed_grad`): on an AMX Xeon
    under ATen's AVX2 kernels, the math kernel, whose gradient flows as the fused one's would."""
    from specroll.model import cpu_attention

    b, H, Hkv, T, D = 2, 6, 2, 5, 16
    q = torch.randn(b, H, T, D).bfloat16().requires_grad_()
    keys, values = torch.randn(b, Hkv, T, D).bfloat16(), torch.randn(b, Hkv, T, D).bfloat16()
    mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None].expand(b, 1, T, T)
    fused = grouped_attention(q, keys, values, mask)
    monkeypatch.setattr(cpu_attention, "_flash_would_fail_here", lambda dtype: True)
    math = grouped_attention(q, keys, values, mask)
    math.float().sum().backward()
    assert q.grad is not None and q.grad.isfinite().all()
    assert torch.allclose(math.float(), fused.float(), atol=2e-2)


@pytest.mark.parametrize(
    "name, native, parameters, expected",
    [
        ("auto", True, BF16_MIN_PARAMETERS, "bfloat16"),  # SmolLM2's size, on AVX512-BF16 or AMX
        ("auto", True, BF16_MIN_PARAMETERS - 1, "float32"),  # the bundled 1 M policy gains nothing
        ("auto", False, BF16_MIN_PARAMETERS, "float32"),  # no bf16 instructions
        ("auto", True, None, "bfloat16"),
        ("float32", True, BF16_MIN_PARAMETERS, "float32"),  # asked for: kept
        ("bfloat16", False, 1, "bfloat16"),
    ],
)
def test_dtype_auto_is_bf16_where_it_runs_natively_on_a_model_that_gains(
    monkeypatch, name, native, parameters, expected
):
    from specroll.model import device

    monkeypatch.setattr(device, "fast_bf16", lambda where: native)
    assert resolve_dtype(name, "cpu", parameters) == expected


def test_an_unknown_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("bf16", "cpu")
