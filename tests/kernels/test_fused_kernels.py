"""The fused elementwise kernels of a decoder layer, run by Triton's interpreter on the CPU: the
residual add with RMSNorm and the rotary of q and k are the bits of the unfused path (torch's add
then the RMSNorm kernel; `apply_rotary` in torch) in fp32 and bf16; SiLU(gate) * up is torch's to
an exp's rounding; and each row's bits are the same whatever else shares the launch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from triton_required import require_triton

require_triton()

from specroll.kernels.add_rms_norm import invariant_add_rms_norm  # noqa: E402
from specroll.kernels.launches import count_launches  # noqa: E402
from specroll.kernels.rms_norm import invariant_rms_norm  # noqa: E402
from specroll.kernels.rotary import invariant_rotary  # noqa: E402
from specroll.kernels.silu_mul import invariant_silu_mul  # noqa: E402
from specroll.model.config import RopeConfig  # noqa: E402
from specroll.model.rope import RotaryTable, apply_rotary, inverse_frequencies  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16]
ROW_COUNTS = (1, 2, 3, 7, 16, 17, 40, 63, 64)
EPS = 1e-6


def _randn(*shape: int, seed: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H", [96, 130])  # a power of two's width and a padded one
def test_add_rms_norm_is_the_bits_of_an_add_then_the_rms_norm_kernel(dtype, H):
    x, y = _randn(64, H, seed=H, dtype=dtype), _randn(64, H, seed=H + 1, dtype=dtype, scale=3.0)
    weight = _randn(H, seed=H + 2, dtype=dtype)
    with count_launches() as launches:
        total, normed = invariant_add_rms_norm(x, y, weight, EPS)
    assert launches == {"add_rms_norm": 1}
    assert total.dtype == normed.dtype == dtype
    assert torch.equal(total, x + y)
    assert torch.equal(normed, invariant_rms_norm(x + y, weight, EPS))


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_rows_are_the_same_bits_for_any_row_count(dtype):
    x, y, weight = (
        _randn(64, 96, seed=3, dtype=dtype),
        _randn(64, 96, seed=4, dtype=dtype),
        _randn(96, seed=5, dtype=dtype),
    )
    total, normed = invariant_add_rms_norm(x, y, weight, EPS)
    for m in ROW_COUNTS:
        alone = invariant_add_rms_norm(x[m - 1 : m], y[m - 1 : m], weight, EPS)
        assert torch.equal(alone[0], total[m - 1 : m]) and torch.equal(alone[1], normed[m - 1 : m]), m
        first = invariant_add_rms_norm(x[:m], y[:m], weight, EPS)
        assert torch.equal(first[0], total[:m]) and torch.equal(first[1], normed[:m]), m


def _rope(B: int, T: int, D: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (B, 1, T, D) of random positions, from the model's own table, in `dtype`."""
    positions = torch.randint(0, 3000, (B, T), generator=torch.Generator().manual_seed(seed))
    cos, sin = RotaryTable(inverse_frequencies(RopeConfig(theta=1e5), D))(positions, 3000)
    return cos.to(dtype), sin.to(dtype)


def _heads(B: int, T: int, heads: int, D: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """(B, heads, T, D), laid out (B, T, heads, D) as a projection's output is."""
    return _randn(B, T, heads, D, seed=seed, dtype=dtype, scale=4.0).transpose(1, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 1, 9, 3, 64), (2, 5, 4, 2, 16), (1, 7, 6, 6, 32)])
def test_rotary_is_the_bits_of_apply_rotary_in_torch(dtype, shape):
    """SmolLM2's heads (9 of queries, 3 of keys, dim 64) at a decode, a verification's 5 tokens, and
    multi-head attention; q and k in one launch."""
    B, T, H, Hkv, D = shape
    q, k = _heads(B, T, H, D, dtype, seed=1), _heads(B, T, Hkv, D, dtype, seed=2)
    cos, sin = _rope(B, T, D, dtype, seed=3)
    with count_launches() as launches:
        q_out, k_out = invariant_rotary(q, k, cos, sin)
    assert launches == {"rotary": 1}
    assert torch.equal(q_out, apply_rotary(q, cos, sin))
    assert torch.equal(k_out, apply_rotary(k, cos, sin))
    contiguous = invariant_rotary(q.contiguous(), k.contiguous(), cos, sin)  # any layout of the heads
    assert torch.equal(contiguous[0], q_out) and torch.equal(contiguous[1], k_out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_rows_are_the_same_bits_for_any_row_count(dtype):
    B, T, H, Hkv, D = 64, 1, 4, 2, 16
    q, k = _heads(B, T, H, D, dtype, seed=4), _heads(B, T, Hkv, D, dtype, seed=5)
    cos, sin = _rope(B, T, D, dtype, seed=6)
    q_out, k_out = invariant_rotary(q, k, cos, sin)
    for m in ROW_COUNTS:
        for rows in (slice(m - 1, m), slice(0, m)):
            alone = invariant_rotary(q[rows], k[rows], cos[rows], sin[rows])
            assert torch.equal(alone[0], q_out[rows]) and torch.equal(alone[1], k_out[rows]), m


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_is_torchs_to_an_exps_rounding(dtype):
    gate, up = _randn(5, 3, 200, seed=7, dtype=dtype, scale=4.0), _randn(5, 3, 200, seed=8, dtype=dtype)
    with count_launches() as launches:
        out = invariant_silu_mul(gate, up)
    assert launches == {"silu_mul": 1}
    expected = (F.silu(gate.double()) * up.double()).float()
    ulps = 1e-6 if dtype == torch.float32 else 2**-7  # a rounding or two of the dtype
    assert out.dtype == dtype and ((out.float() - expected).abs() <= ulps * expected.abs() + 1e-30).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_rows_are_the_same_bits_for_any_row_count(dtype):
    """Rows of 200 elements in blocks of 1,024: a block holds parts of several rows, and which ones
    depends on the row count; each element is computed alone, so a row's bits do not."""
    gate, up = _randn(64, 200, seed=9, dtype=dtype, scale=4.0), _randn(64, 200, seed=10, dtype=dtype)
    out = invariant_silu_mul(gate, up)
    for m in ROW_COUNTS:
        assert torch.equal(invariant_silu_mul(gate[m - 1 : m], up[m - 1 : m]), out[m - 1 : m]), m
        assert torch.equal(invariant_silu_mul(gate[64 - m :], up[64 - m :]), out[64 - m :]), m
