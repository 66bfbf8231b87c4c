"""A residual add fused with the RMSNorm that reads it: one program a row computes x + y, rounds it
to the model's dtype, stores it (the new residual) and normalises it with `rms_norm`'s own
arithmetic (`normed_row`, the same launch options), so its two outputs are the bits of `x + y`
followed by `invariant_rms_norm`, in one launch instead of two and one read of the row instead of
three."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specroll.kernels.launches import launch
from specroll.kernels.rms_norm import normed_row
from specroll.kernels.rounding import rounded


@triton.jit
def _add_rms_norm_kernel(x_ptr, y_ptr, w_ptr, sum_ptr, out_ptr, H: tl.constexpr, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_H)
    at, inside = row * H + cols, cols < H
    x = tl.load(x_ptr + at, mask=inside, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + at, mask=inside, other=0.0).to(tl.float32)
    dtype = sum_ptr.dtype.element_ty
    total = rounded(x + y, dtype)  # as torch adds two tensors of the dtype
    tl.store(sum_ptr + at, total.to(dtype), mask=inside)
    out = normed_row(total, w_ptr, cols, H, eps, dtype)
    tl.store(out_ptr + at, out.to(out_ptr.dtype.element_ty), mask=inside)


def invariant_add_rms_norm(
    x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, y (..., H) of one dtype, `weight` (H,) -> (x + y, RMSNorm(x + y)), each row's bits its own."""
    H = x.shape[-1]
    x_rows, y_rows = x.reshape(-1, H).contiguous(), y.reshape(-1, H).contiguous()
    total, out = torch.empty_like(x_rows), torch.empty_like(x_rows)
    if x_rows.shape[0]:
        launch(
            _add_rms_norm_kernel, (x_rows.shape[0],), x_rows, y_rows, weight.contiguous(), total, out,
            H, eps, BLOCK_H=triton.next_power_of_2(H), enable_fp_fusion=False,
        )  # fmt: skip
    return total.reshape(x.shape), out.reshape(x.shape)
