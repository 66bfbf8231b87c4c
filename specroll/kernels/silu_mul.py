"""SwiGLU's elementwise half, SiLU(gate) * up, in one launch instead of two.

Each element alone, so batch-invariant: SiLU(g) = g / (1 + exp(-g)) in fp32, rounded to the dtype
(as torch rounds its SiLU), times `up`, rounded. The bits need not be torch's (an exp is each
library's own), so the engine and the trainer both run this kernel: the trainer's forward through
`model.differentiable_kernels`, whose backward is torch's math."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specroll.kernels.launches import launch
from specroll.kernels.rounding import rounded

BLOCK = 1024


@triton.jit(do_not_specialize=["n"])
def _silu_mul_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = at < n
    gate = tl.load(gate_ptr + at, mask=inside, other=0.0).to(tl.float32)
    up = tl.load(up_ptr + at, mask=inside, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    silu = rounded(gate / (1.0 + tl.exp(-gate)), dtype)
    tl.store(out_ptr + at, rounded(silu * up, dtype).to(dtype), mask=inside)


def invariant_silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up (..., I) of one dtype -> SiLU(gate) * up, elementwise."""
    gate, up = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    if n:
        launch(
            _silu_mul_kernel, (triton.cdiv(n, BLOCK),), gate, up, out, n, BLOCK=BLOCK, enable_fp_fusion=False
        )
    return out
