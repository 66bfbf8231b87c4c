"""A batch-invariant linear layer: y = x @ W.T + b with fixed tiles and no split along K.

Every output element is accumulated in fp32 over K in order, BLOCK_K columns at a time, by a tile
of BLOCK_M x BLOCK_N outputs; the tile sizes never change and the row count is a plain argument
(not specialised), so one compiled kernel serves every call and a row's bits do not depend on how
many rows share it. At decode the padded tile costs little: the weights' read dominates.

In Triton's interpreter `tl.dot` is numpy's matmul, that is the CPU's BLAS, whose kernels need not
sum every output of a tile alike: OpenBLAS's Haswell sgemm (what OPENBLAS_CORETYPE=Haswell selects)
gives a row other bits at rows 6-11 of every 12 of the tile than at rows 0-5, so a row's bits would
follow its place in the launch. There the tile's product is instead the products summed over K in
order (`IN_ORDER`), each output alike: the order the kernel fixes, which on a GPU `tl.dot` keeps.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specroll.kernels import interpreted
from specroll.kernels.launches import launch

BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS = 64, 64, 64, 4
INTERPRETED = interpreted()  # read once: Triton decides at decoration time too, not per call


@triton.jit(do_not_specialize=["M"])
def _linear_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, M, N, K: tl.constexpr,
    HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, IN_ORDER: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        in_k = ks < K
        a = tl.load(
            x_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & in_k[None, :], other=0.0
        )
        b = tl.load(
            w_ptr + cols[None, :] * K + ks[:, None], mask=(cols[None, :] < N) & in_k[:, None], other=0.0
        )
        if IN_ORDER:  # the interpreter (module docstring): in fp32, summed over k in order
            acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
        elif IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + rows[:, None] * N + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x (..., K), weight (N, K), each row's bits its own."""
    K, N = x.shape[-1], weight.shape[0]
    flat = x.reshape(-1, K).contiguous()
    M = flat.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if M:
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        launch(
            _linear_kernel, grid,
            flat, weight.contiguous(), bias if bias is not None else weight, out, M, N, K,
            HAS_BIAS=bias is not None, IEEE=x.dtype == torch.float32, IN_ORDER=INTERPRETED,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=NUM_WARPS,
        )  # fmt: skip
    return out.reshape(*x.shape[:-1], N)
