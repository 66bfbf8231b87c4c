"""A batch-invariant RMSNorm: one program a row, the sum of squares over the row at one width.

The arithmetic is Hugging Face's: normalise in fp32, round to the model's dtype, then scale by the
weight (in fp32 the round is a no-op). Launched with floating-point contraction off, so the sum of
squares adds rounded squares (no fused multiply-add): the bits are the source's arithmetic, and
`add_rms_norm`, which shares `normed_row`, gives the same ones."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specroll.kernels.launches import launch
from specroll.kernels.rounding import rounded


@triton.jit
def normed_row(x, w_ptr, cols, H: tl.constexpr, eps, dtype: tl.constexpr):
    """One row x (BLOCK_H,) in fp32, zero past H -> RMSNorm(x) * w, each step rounded to `dtype` (the
    model's) as Hugging Face rounds it, returned in fp32."""
    inverse = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    normed = rounded(x * inverse, dtype)
    w = tl.load(w_ptr + cols, mask=cols < H, other=0.0).to(tl.float32)
    return rounded(normed * w, dtype)


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, H: tl.constexpr, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0).to(tl.float32)
    out = normed_row(x, w_ptr, cols, H, eps, out_ptr.dtype.element_ty)
    tl.store(out_ptr + row * H + cols, out.to(out_ptr.dtype.element_ty), mask=cols < H)


def invariant_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over x's last dimension (H) with `weight` (H,), each row's bits its own."""
    H = x.shape[-1]
    flat = x.reshape(-1, H).contiguous()
    out = torch.empty_like(flat)
    if flat.shape[0]:
        launch(
            _rms_norm_kernel, (flat.shape[0],), flat, weight.contiguous(), out, H, eps,
            BLOCK_H=triton.next_power_of_2(H), enable_fp_fusion=False,
        )  # fmt: skip
    return out.reshape(x.shape)
