"""Batch-invariant reductions over a row of the vocabulary: softmax, log-softmax and the running sum
an inverse-CDF draw inverts. One program a row walks the vocabulary in chunks of `BLOCK_V`, in
order: the maximum (exact in any order), then the sum of exponentials chunk after chunk, so a row's
bits are its own whatever the number of rows (a batch of decodes or of verification rows)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specroll.kernels.launches import launch

BLOCK_V = 1024


@triton.jit
def _row_max(x_ptr, V: tl.constexpr, BLOCK_V: tl.constexpr):
    top = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    for v0 in range(0, V, BLOCK_V):
        v = v0 + tl.arange(0, BLOCK_V)
        top = tl.maximum(top, tl.load(x_ptr + v, mask=v < V, other=float("-inf")))
    return tl.max(top, axis=0)


@triton.jit
def _row_exp_sum(x_ptr, top, V: tl.constexpr, BLOCK_V: tl.constexpr):
    total = 0.0
    for v0 in range(0, V, BLOCK_V):
        v = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(x_ptr + v, mask=v < V, other=float("-inf"))
        total += tl.sum(tl.exp(x - top), axis=0)
    return total


@triton.jit(do_not_specialize=["N"])
def _softmax_kernel(x_ptr, out_ptr, N, V: tl.constexpr, BLOCK_V: tl.constexpr, LOG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * V
    top = _row_max(x_ptr + row, V, BLOCK_V)
    total = _row_exp_sum(x_ptr + row, top, V, BLOCK_V)
    for v0 in range(0, V, BLOCK_V):
        v = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(x_ptr + row + v, mask=v < V, other=float("-inf"))
        if LOG:
            y = x - top - tl.log(total)
        else:
            y = tl.exp(x - top) / total
        tl.store(out_ptr + row + v, y, mask=v < V)


@triton.jit(do_not_specialize=["N"])
def _cumsum_kernel(x_ptr, out_ptr, N, V: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * V
    carry = tl.zeros((1,), tl.float64)
    last = tl.arange(0, BLOCK_V) == BLOCK_V - 1
    for v0 in range(0, V, BLOCK_V):
        v = v0 + tl.arange(0, BLOCK_V)
        x = tl.load(x_ptr + row + v, mask=v < V, other=0.0)
        running = tl.cumsum(x, axis=0) + carry
        tl.store(out_ptr + row + v, running, mask=v < V)
        carry = tl.sum(tl.where(last, running, 0.0), axis=0, keep_dims=True)  # its last element, exactly


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    V = x.shape[-1]
    flat = x.reshape(-1, V).contiguous()
    return flat, flat.shape[0], V


def softmax_rows(x: torch.Tensor, log: bool = False) -> torch.Tensor:
    """softmax (or log-softmax) over the last dimension of float32 `x`, each row's bits its own."""
    if x.dtype != torch.float32:
        raise TypeError(f"softmax_rows takes float32, got {x.dtype}")
    flat, N, V = _rows(x)
    out = torch.empty_like(flat)
    if N:
        BLOCK = min(BLOCK_V, triton.next_power_of_2(V))
        launch(_softmax_kernel, (N,), flat, out, N, V, BLOCK_V=BLOCK, LOG=log)
    return out.reshape(x.shape)


def cumsum_rows(x: torch.Tensor) -> torch.Tensor:
    """The running sum over the last dimension of float64 `x` (an inverse-CDF's), in vocabulary
    order by chunks, each row's bits its own."""
    if x.dtype != torch.float64:
        raise TypeError(f"cumsum_rows takes float64, got {x.dtype}")
    flat, N, V = _rows(x)
    out = torch.empty_like(flat)
    if N:
        launch(_cumsum_kernel, (N,), flat, out, N, V, BLOCK_V=min(BLOCK_V, triton.next_power_of_2(V)))
    return out.reshape(x.shape)
