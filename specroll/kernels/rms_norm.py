"""A batch-invariant RMSNorm: one program a row, the sum of squares over the row at one width.

The arithmetic is Hugging Face's: normalise in fp32, round to the model's dtype, then scale by the
weight (in fp32 the round is a no-op)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["rows"])
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, rows, H: tl.constexpr, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    x = tl.load(x_ptr + row * H + cols, mask=cols < H, other=0.0).to(tl.float32)
    inverse = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    normed = (x * inverse).to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < H, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * H + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=cols < H)


def invariant_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over x's last dimension (H) with `weight` (H,), each row's bits its own."""
    H = x.shape[-1]
    flat = x.reshape(-1, H).contiguous()
    out = torch.empty_like(flat)
    if flat.shape[0]:
        _rms_norm_kernel[(flat.shape[0],)](
            flat, weight.contiguous(), out, flat.shape[0], H, eps, BLOCK_H=triton.next_power_of_2(H)
        )
    return out.reshape(x.shape)
