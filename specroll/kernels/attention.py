"""Batch-invariant attention: each query's keys in fixed ranges of fixed blocks, in column order.

The keys are cut into ranges of `plans.KEY_SPLIT` chain columns, fixed whatever the read length,
so that a long context fills the device (one program per range: at a decode of SmolLM2 at batch 1,
3 programs for every 256 positions, not 3 in all). One program per (sequence, key head, query
token, range) computes the head's G query heads for that token over its range: scores over the head
dim, then an online softmax over blocks of BLOCK_N key columns, in order; its maximum, sum and
weighted values go to fp32 partials, which a second kernel merges in range order. A block past the
query's context is all masked: its maximum is -inf, so the running maximum stays, the rescaling
factor is exp(0) = 1 and the sums add exact zeros; a range past it is skipped by the merge. So
neither the read length (which only adds trailing ranges), nor how many queries the sequence has (a
decode's one, a verification's k+1), nor the other sequences change a query's bits. A tree node
reads its path's keys in chain order (`model.chain_order`), at the columns plain decoding of that
path reads them at.

BLOCK_N and the warps are a function of the group and the head dim alone (`plans.attention_tiles`): the
products over a block hold G x BLOCK_N x D fp32 values, which must fit a program's registers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specroll.kernels.launches import launch
from specroll.kernels.plans import KEY_SPLIT, attention_tiles


@triton.jit(do_not_specialize=["L", "num_splits", "HKV", "T"])
def _attention_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, col_ptr, part_ptr, L, num_splits, scale,
    sqb, sqh, sqt, skb, skh, skl, smb, smt, sml, scb, sct,
    HKV, T, G: tl.constexpr, D: tl.constexpr, G_PAD: tl.constexpr,
    BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, CHAIN_ORDER: tl.constexpr,
):  # fmt: skip
    """One program per (sequence, key head, query token, key range): the online softmax over the
    range's blocks in order -> its maximum, sum and weighted values (fp32 partials)."""
    b, h, ts = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    t, split = ts // num_splits, ts % num_splits
    g, d = tl.arange(0, G_PAD), tl.arange(0, D)
    heads = h * G + g
    q = tl.load(q_ptr + b * sqb + heads[:, None] * sqh + t * sqt + d[None, :], mask=g[:, None] < G, other=0.0)
    q = q.to(tl.float32) * scale  # (G_PAD, D)
    top = tl.full((G_PAD,), float("-inf"), tl.float32)
    total = tl.zeros((G_PAD,), tl.float32)
    acc = tl.zeros((G_PAD, D), tl.float32)
    n0 = L * 0 + split * SPLIT  # a while loop: Triton's interpreter cannot bound a `for` by a runtime length
    end = tl.minimum(n0 + SPLIT, L)
    while n0 < end:
        n = n0 + tl.arange(0, BLOCK_N)
        seen = tl.load(mask_ptr + b * smb + t * smt + n * sml, mask=n < end, other=0) != 0
        columns = n
        if CHAIN_ORDER:
            columns = tl.load(col_ptr + b * scb + t * sct + n, mask=n < end, other=0)
        at = b * skb + h * skh + columns[:, None] * skl + d[None, :]
        keys = tl.load(k_ptr + at, mask=seen[:, None], other=0.0).to(tl.float32)  # (BLOCK_N, D)
        scores = tl.sum(q[:, None, :] * keys[None, :, :], axis=2)  # (G_PAD, BLOCK_N)
        scores = tl.where(seen[None, :], scores, float("-inf"))
        new_top = tl.maximum(top, tl.max(scores, axis=1))
        alive = new_top > float("-inf")
        factor = tl.where(alive, tl.exp(top - tl.where(alive, new_top, 0.0)), 1.0)
        probs = tl.where(seen[None, :], tl.exp(scores - tl.where(alive, new_top, 0.0)[:, None]), 0.0)
        values = tl.load(v_ptr + at, mask=seen[:, None], other=0.0).to(tl.float32)
        total = total * factor + tl.sum(probs, axis=1)
        acc = acc * factor[:, None] + tl.sum(probs[:, :, None] * values[None, :, :], axis=1)
        top = new_top
        n0 += BLOCK_N
    base = part_ptr + (((b * HKV + h) * T + t) * num_splits + split) * G_PAD * (D + 2) + g * (D + 2)
    tl.store(base[:, None] + d[None, :], acc)
    tl.store(base + D, top)
    tl.store(base + D + 1, total)


@triton.jit(do_not_specialize=["num_splits", "HKV", "T"])
def _attention_merge_kernel(
    part_ptr, out_ptr, num_splits, ob, oh, ot, HKV, T,
    G: tl.constexpr, D: tl.constexpr, G_PAD: tl.constexpr,
):  # fmt: skip
    """One program per (sequence, key head, query token): the key ranges' partials merged in range
    order; a range the query sees no key of changes nothing (not even a zero's sign)."""
    b, h, t = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    g, d = tl.arange(0, G_PAD), tl.arange(0, D)
    top = tl.full((G_PAD,), float("-inf"), tl.float32)
    total = tl.zeros((G_PAD,), tl.float32)
    acc = tl.zeros((G_PAD, D), tl.float32)
    split = num_splits * 0
    while split < num_splits:
        base = part_ptr + (((b * HKV + h) * T + t) * num_splits + split) * G_PAD * (D + 2) + g * (D + 2)
        part_top, part_total = tl.load(base + D), tl.load(base + D + 1)
        part_acc = tl.load(base[:, None] + d[None, :])
        has_keys = part_top > float("-inf")
        new_top = tl.maximum(top, part_top)
        safe = tl.where(has_keys, new_top, 0.0)
        factor = tl.exp(top - safe)  # exp(-inf) = 0 before the first range with keys
        part_factor = tl.exp(part_top - safe)
        total = tl.where(has_keys, total * factor + part_total * part_factor, total)
        acc = tl.where(has_keys[:, None], acc * factor[:, None] + part_acc * part_factor[:, None], acc)
        top = tl.where(has_keys, new_top, top)
        split += 1
    out = acc / total[:, None]
    heads = h * G + g
    dest = out_ptr + b * ob + heads[:, None] * oh + t * ot + d[None, :]
    tl.store(dest, out.to(out_ptr.dtype.element_ty), mask=g[:, None] < G)


def invariant_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    columns: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax attention, batch-invariant: q (b, H, T, D); keys, values (b, Hkv, L, D) (a view of
    the cache: only the last dimension need be contiguous); mask (b, 1, T, L) True where a query may
    attend (every query sees at least one key); with `columns` (b, T, L) (trees: `ChainOrder.columns`),
    query t reads chain column j at cache column columns[b, t, j] and `mask` is in chain order
    -> (b, H, T, D). Keys are read in ranges of `plans.KEY_SPLIT` chain columns, one program each,
    whose partials a second kernel merges in range order."""
    b, H, T, D = q.shape
    Hkv, L = keys.shape[1], keys.shape[2]
    if keys.stride(-1) != 1 or values.stride() != keys.stride():
        keys, values = keys.contiguous(), values.contiguous()
    if q.stride(-1) != 1:
        q = q.contiguous()
    # (b, T, H, D) underneath: the caller's (b, T, H * D) for the output projection is a view
    out = torch.empty(b, T, H, D, dtype=q.dtype, device=q.device).transpose(1, 2)
    in_chain_order = columns is not None
    columns = columns.contiguous() if in_chain_order else mask  # without chain order: never read
    G = H // Hkv
    G_PAD = triton.next_power_of_2(G)
    block_n, num_warps = attention_tiles(G_PAD, D)
    if D & (D - 1):
        raise ValueError(f"invariant attention needs a power-of-two head dim, got {D}")
    num_splits = -(-L // KEY_SPLIT)
    partials = torch.empty(b * Hkv * T * num_splits * G_PAD * (D + 2), dtype=torch.float32, device=q.device)
    launch(
        _attention_kernel, (b, Hkv, T * num_splits), q, keys, values, mask, columns, partials, L, num_splits,
        D**-0.5, *q.stride()[:3], *keys.stride()[:3], mask.stride(0), mask.stride(2), mask.stride(3),
        columns.stride(0), columns.stride(1), Hkv, T,
        G=G, D=D, G_PAD=G_PAD, BLOCK_N=block_n, SPLIT=KEY_SPLIT, CHAIN_ORDER=in_chain_order,
        num_warps=num_warps,
    )  # fmt: skip
    launch(
        _attention_merge_kernel, (b, Hkv, T), partials, out, num_splits, *out.stride()[:3], Hkv, T,
        G=G, D=D, G_PAD=G_PAD, num_warps=num_warps,
    )  # fmt: skip
    return out
