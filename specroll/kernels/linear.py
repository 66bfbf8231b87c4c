"""A batch-invariant linear layer: y = x @ W.T + b, each output's reduction over K fixed by (K, N).

Every output element is accumulated in fp32 over K in order, BLOCK_K columns at a time, by a tile of
BLOCK_M x BLOCK_N outputs. At a decode (a few rows) one program per column tile leaves most of a
GPU idle (SmolLM2's q projection: 9 programs of 64 columns against an H100's 132 SMs), so a layer's
K may be split: split s sums its `split_k` columns of K, writes its fp32 partial to a workspace, and
the last of a tile's splits to finish (a counter per output tile, which it resets) adds the partials
in split order, 0, 1, ..., then the bias. Which program finishes last changes nothing: the sum's
order is the splits' order. The plan (`linear_plan`: BLOCK_N, BLOCK_K, the split) is a function of
(K, N) alone, never of the row count, which is a plain argument (not specialised on): one compiled
kernel per layer serves every call, and a row's bits do not depend on how many rows share it.

The counters live in one int32 buffer per device, zero between launches (each tile's last split
zeroes its own): launches on one stream, as the engine's and the trainer's forwards run, never share
them at once. A buffer outgrown is kept, not freed: a recorded CUDA graph may still point into it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specroll.kernels import interpreted
from specroll.kernels.launches import launch
from specroll.kernels.plans import BLOCK_M, LINEAR_WARPS, LinearPlan, linear_plan

INTERPRETED = interpreted()  # read once: Triton decides at decoration time too, not per call


@triton.jit(do_not_specialize=["M"])
def _linear_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, part_ptr, count_ptr, M, N, K: tl.constexpr,
    HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, SUM_PRODUCTS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_SPLITS: tl.constexpr, SPLIT_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(2)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ks = split * SPLIT_K + tl.arange(0, BLOCK_K)
    a_at = x_ptr + rows[:, None] * K + ks[None, :]  # (BLOCK_M, BLOCK_K), moved BLOCK_K a step
    b_at = w_ptr + cols[None, :] * K + ks[:, None]  # (BLOCK_K, BLOCK_N)
    for k0 in range(0, SPLIT_K, BLOCK_K):  # a constant trip count: the last split's tail is masked
        in_k = ks + k0 < K
        a = tl.load(a_at + k0, mask=(rows[:, None] < M) & in_k[None, :], other=0.0)
        b = tl.load(b_at + k0, mask=(cols[None, :] < N) & in_k[:, None], other=0.0)
        if SUM_PRODUCTS:  # the interpreter: numpy's matmul sums a row in an order set by its place
            acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
        elif IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    at = rows[:, None] * N + cols[None, :]
    is_whole = True
    if NUM_SPLITS > 1:
        acc, is_whole = _sum_of_splits(acc, part_ptr, count_ptr, at, inside, split, M, N, NUM_SPLITS)
    if is_whole:
        if HAS_BIAS:
            acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def _sum_of_splits(acc, part_ptr, count_ptr, at, inside, split, M, N, NUM_SPLITS: tl.constexpr):
    """This split's partial to the workspace; the tile's last split to arrive sums them all, in
    split order, and zeroes the tile's counter -> (the sum there, else the partial; whether it is the
    sum)."""
    tl.store(part_ptr + split * M * N + at, acc, mask=inside)
    tl.debug_barrier()  # every thread's partial written before the program's arrival is counted
    tile = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    is_last = arrived == NUM_SPLITS - 1
    if is_last:
        acc = tl.load(part_ptr + at, mask=inside, other=0.0, cache_modifier=".cg")
        for s in range(1, NUM_SPLITS):
            acc += tl.load(part_ptr + s * M * N + at, mask=inside, other=0.0, cache_modifier=".cg")
        tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")
    return acc, is_last


_counters: dict[torch.device, list[torch.Tensor]] = {}  # every buffer made, the newest last


def _tile_counters(num_tiles: int, device: torch.device) -> torch.Tensor:
    """A zeroed int32 counter per output tile: the device's buffer, a larger one where it is too
    small (made outside a CUDA graph's recording; inside one, a buffer for this call alone)."""
    made = _counters.setdefault(device, [])
    if made and made[-1].numel() >= num_tiles:
        return made[-1]
    buffer = torch.zeros(max(num_tiles, 4096), dtype=torch.int32, device=device)
    if not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        made.append(buffer)
    return buffer


def invariant_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, plan: LinearPlan | None = None
) -> torch.Tensor:
    """F.linear(x, weight, bias) for x (..., K), weight (N, K), each row's bits its own; `plan`
    (default `linear_plan(K, N)`) is for measuring other tiles, not for the model."""
    K, N = x.shape[-1], weight.shape[0]
    plan = plan or linear_plan(K, N)
    flat = x.reshape(-1, K).contiguous()
    M = flat.shape[0]
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    if not M:
        return out.reshape(*x.shape[:-1], N)
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, plan.block_n), plan.num_splits)
    parts, counters = out, out  # never read without a split
    if plan.num_splits > 1:
        parts = torch.empty(plan.num_splits, M, N, dtype=torch.float32, device=x.device)
        counters = _tile_counters(grid[0] * grid[1], x.device)
    is_fp32 = x.dtype == torch.float32
    launch(
        _linear_kernel, grid,
        flat, weight.contiguous(), bias if bias is not None else weight, out, parts, counters, M, N, K,
        HAS_BIAS=bias is not None, IEEE=is_fp32, SUM_PRODUCTS=INTERPRETED,
        BLOCK_M=BLOCK_M, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k,
        NUM_SPLITS=plan.num_splits, SPLIT_K=plan.split_k, num_warps=LINEAR_WARPS,
    )  # fmt: skip
    return out.reshape(*x.shape[:-1], N)
