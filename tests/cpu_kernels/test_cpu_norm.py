"""The CPU row kernels: RMSNorm, the residual add with the norm after it, SiLU(gate) * up."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specroll.cpu_kernels import ops
from specroll.model.transformer import rms_norm


def _rows(n: int, width: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, width, generator=g) * 3).bfloat16()


def test_rms_norm_is_torchs_to_bf16s_rounding_and_the_same_bits_in_any_batch():
    x, weight = _rows(9, 576), _rows(1, 576, seed=1)[0]
    out = ops.rms_norm(x, weight, 1e-5)
    assert torch.allclose(out.float(), rms_norm(x, weight, 1e-5).float(), rtol=2e-2, atol=1e-2)
    for i in range(9):
        assert torch.equal(ops.rms_norm(x[i : i + 1], weight, 1e-5), out[i : i + 1])


def test_a_width_past_the_vector_tail_normalises_every_column():
    x, weight = _rows(2, 70), torch.ones(70).bfloat16()
    out = ops.rms_norm(x, weight, 1e-6).float()
    assert torch.allclose(out.pow(2).mean(-1), torch.ones(2), rtol=3e-2)


def test_the_fused_add_is_torchs_bf16_sum_and_the_norm_of_it():
    x, y, weight = _rows(5, 576), _rows(5, 576, seed=2), _rows(1, 576, seed=3)[0]
    total, normed = ops.add_rms_norm(x, y, weight, 1e-6)
    assert torch.equal(total, x + y)
    assert torch.equal(normed, ops.rms_norm(x + y, weight, 1e-6))


def test_silu_mul_is_torchs_to_bf16s_rounding_elementwise():
    gate, up = _rows(4, 1536), _rows(4, 1536, seed=1)
    out = ops.silu_mul(gate, up)
    assert torch.allclose(out.float(), (F.silu(gate.float()) * up.float()), rtol=2e-2, atol=2e-2)
    assert torch.equal(ops.silu_mul(gate[1:2], up[1:2]), out[1:2])
    extreme = torch.tensor([[-200.0, -90.0, 0.0, 90.0, 200.0]]).bfloat16()
    assert torch.equal(
        ops.silu_mul(extreme, torch.ones_like(extreme)).float(), F.silu(extreme.float()).bfloat16().float()
    )
