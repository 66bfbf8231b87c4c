"""Rotary position embeddings for a layer's queries and keys in one launch, elementwise, the bits of
`specroll.model.rope.apply_rotary` in torch.

One program a token (b, t) rotates its H query heads and Hkv key heads by the token's cos and sin
rows: out = x * cos + rotated * sin with rotated = (-x2, x1), the halves of the head dim paired as in
the Hugging Face checkpoints. Each product and the sum are rounded to the dtype as torch's three ops
round them (in fp32 arithmetic, the dtype's values widened exactly), and the launch turns
floating-point contraction off, so `a * b + c` is a product rounded then a sum, never a fused
multiply-add: torch runs them as separate kernels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specroll.kernels.launches import launch
from specroll.kernels.rounding import rounded


@triton.jit
def _rotate_heads(
    x_ptr, out_ptr, b, t, sxb, sxh, sxt, sob, soh, sot, c1, c2, s1, s2,
    HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
):  # fmt: skip
    heads, cols = tl.arange(0, HEADS_PAD)[:, None], tl.arange(0, HALF_PAD)[None, :]
    inside = (heads < HEADS) & (cols < HALF)
    x_at = x_ptr + b * sxb + t * sxt + heads * sxh + cols
    x1 = tl.load(x_at, mask=inside, other=0.0)
    x2 = tl.load(x_at + HALF, mask=inside, other=0.0)
    dtype = out_ptr.dtype.element_ty
    x1, x2 = x1.to(tl.float32), x2.to(tl.float32)
    out1 = rounded(rounded(x1 * c1, dtype) + rounded(-x2 * s1, dtype), dtype)
    out2 = rounded(rounded(x2 * c2, dtype) + rounded(x1 * s2, dtype), dtype)
    out_at = out_ptr + b * sob + t * sot + heads * soh + cols
    tl.store(out_at, out1.to(dtype), mask=inside)
    tl.store(out_at + HALF, out2.to(dtype), mask=inside)


@triton.jit
def _rotary_kernel(
    q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr, T,
    sqb, sqh, sqt, skb, skh, skt, scb, sct, sqob, sqoh, sqot, skob, skoh, skot,
    H: tl.constexpr, H_PAD: tl.constexpr, HKV: tl.constexpr, HKV_PAD: tl.constexpr,
    HALF: tl.constexpr, HALF_PAD: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0)
    b, t = token // T, token % T
    cols = tl.arange(0, HALF_PAD)[None, :]
    at, inside = b * scb + t * sct + cols, cols < HALF
    c1 = tl.load(cos_ptr + at, mask=inside, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + at + HALF, mask=inside, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + at, mask=inside, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + at + HALF, mask=inside, other=0.0).to(tl.float32)
    _rotate_heads(
        q_ptr, q_out_ptr, b, t, sqb, sqh, sqt, sqob, sqoh, sqot, c1, c2, s1, s2, H, H_PAD, HALF, HALF_PAD
    )
    _rotate_heads(
        k_ptr, k_out_ptr, b, t, skb, skh, skt, skob, skoh, skot, c1, c2, s1, s2, HKV, HKV_PAD, HALF, HALF_PAD
    )


def _rows_of(x: torch.Tensor) -> torch.Tensor:
    """x (B, heads, T, D) with its head dim contiguous (a copy only where it is not)."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _output_like(x: torch.Tensor) -> torch.Tensor:
    """An empty (B, heads, T, D), (B, T, heads, D) underneath, as the projections lay heads out."""
    B, heads, T, D = x.shape
    return torch.empty(B, T, heads, D, dtype=x.dtype, device=x.device).transpose(1, 2)


def invariant_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, H, T, D), k (B, Hkv, T, D), cos and sin (B, 1, T, D) of q's dtype ->
    (apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)), the same bits, in one launch."""
    B, H, T, D = q.shape
    q, k = _rows_of(q), _rows_of(k)
    cos, sin = cos.expand(B, 1, T, D).contiguous(), sin.expand(B, 1, T, D).contiguous()
    q_out, k_out = _output_like(q), _output_like(k)
    HKV, HALF = k.shape[1], D // 2
    if B * T:
        launch(
            _rotary_kernel, (B * T,), q, k, cos, sin, q_out, k_out, T,
            *q.stride()[:3], *k.stride()[:3], cos.stride(0), cos.stride(2),
            *q_out.stride()[:3], *k_out.stride()[:3],
            H=H, H_PAD=triton.next_power_of_2(H), HKV=HKV, HKV_PAD=triton.next_power_of_2(HKV),
            HALF=HALF, HALF_PAD=triton.next_power_of_2(HALF), enable_fp_fusion=False,
        )  # fmt: skip
    return q_out, k_out
