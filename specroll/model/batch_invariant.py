"""Batch-invariant numerics: a row's logits do not depend, to the bit, on the forward it is part of.

Exact mode draws a token by inverting the CDF of the target's distribution at a keyed uniform, so
a request's tokens are a function of its logits alone. Logits of one row differ between forwards of
different shapes, though, by the rounding of reductions done in a different order: on a 49,152-token
vocabulary a difference of ~1e-5 in a logit moves CDF boundaries of tail tokens past the uniform
often enough that a third of 200-token requests changed between speculative and plain decoding.
Here every reduction a row goes through is made independent of the rest of the forward:

- Linear layers: BLAS computes a row of `x @ W.T` with kernels chosen by the call's shape and thread
  count, so a row's bits depend on how many rows share the call (measured on x86 with MKL: 1, 2-12
  and >= 16 rows are three regimes for 576 inputs; with two threads a 1536-input layer has a fourth
  regime at 64-192 rows; in bf16, reported on an Intel Xeon with AMX, oneDNN's kernels agree with a
  256-row call only at 1, 2 and from 40 rows for 576 -> 1536; measured here, its AVX-512 emulation of
  bf16 from 2 rows). Each layer's shape is
  probed once per process, thread count and dtype, on the kernel the layer runs (`F.linear`, or
  weights packed for oneDNN, `model.packed_linear`) (`invariant_row_sizes`): the call sizes in
  `ROW_SIZES` whose rows agree with the largest call's.
  Every call is then made at one of those sizes: rows are padded up to the next one, and more rows
  than the largest are cut into calls of the largest. So every GEMM that runs has a probed shape.
  Each size is probed twice, the second time with its input one element off the buffer alignment,
  so a BLAS whose bits vary from call to call or with alignment serves no size it could not repeat.
- Attention: computed in fp32 whatever the model's dtype (a bf16 model's queries, keys and values
  are widened exactly, its output rounded back once). Keys are processed in fixed blocks of `BLOCK`
  positions. Scores and the
  probability-weighted values of each block are batched matmuls whose reduction is over a fixed
  length (the head dim, then one block), each with at least `invariant_query_rows` query rows (a
  single row takes another kernel; probed once per process); the softmax maximum is exact in any
  order; the blocks' partial results are added by a running sum in block order (`cumsum`), where
  trailing all-masked blocks add exact zeros. So neither the read length of the batch, nor how many
  queries a row has (decode or verification width), nor the other rows change a row's output.
  (PyTorch's fused attention differs by ~1e-7 between 1 and 2 queries or one more masked key.)
  A tree's nodes read their paths' keys in chain order (`model.chain_order`), as plain decoding would.
- Elementwise maps (exp, SiLU) run on tensors whose rows are multiples of the vector width, so no
  element falls into a scalar tail loop with different rounding; rotary cos/sin are read from a
  table (`specroll.model.rope.RotaryTable`), not computed per forward.

Measured, not assumed: `tests/model/test_batch_invariance.py` checks bitwise equality of logits
across batch sizes, widths and read lengths, and the engine tests check token identity.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F

from specroll.model import packed_linear

if TYPE_CHECKING:
    from specroll.model.chain_order import ChainOrder

BLOCK = 64  # key positions per attention block; read lengths are rounded up to a multiple of it
# linear call sizes that may run: every count to 16, then steps of an eighth or so, so that a call is
# padded by at most 1/4 of its rows (a batch-8, 5-wide verification runs 40 rows, not 48)
ROW_SIZES = (*range(1, 17), *range(20, 33, 4), *range(40, 65, 8), *range(80, 129, 16), *range(160, 257, 32))
MAX_THRESHOLD = 64  # a layer whose rows agree only from more rows than this is not served


class BatchInvarianceUnavailable(RuntimeError):
    """This BLAS, at this thread count, gives no row-count-invariant linear layer of some shape."""


@functools.cache
def invariant_row_sizes(
    in_features: int,
    out_features: int,
    threads: int,
    dtype: torch.dtype = torch.float32,
    has_bias: bool = False,
    packed: bool = False,
) -> tuple[int, ...]:
    """The call sizes of `ROW_SIZES` at which an (in -> out) linear layer's rows are the same bits as
    in the largest call, probed on this machine's kernels at `threads` threads (the caller's current
    count; it is part of the key because the kernels depend on it), in the layer's `dtype` and with
    its bias: a bf16 layer runs other kernels (oneDNN's) than an fp32 one (the BLAS's), with regimes
    of their own. `packed`: the layer runs on weights packed for oneDNN (`model.packed_linear`), and a
    size serves only where the packed call and `F.linear` both give the largest `F.linear` call's
    bits, so a forward that differentiates through `F.linear` (the trainer's) gets the engine's.
    Every size that agrees serves, so a size of another regime costs only padding to the next one."""
    if threads != torch.get_num_threads():
        raise ValueError(f"probe at the current thread count ({torch.get_num_threads()}), not {threads}")
    weight, bias, x = _probe_operands(in_features, out_features, dtype, has_bias)
    calls = [lambda rows: F.linear(rows, weight, bias)]
    if packed:
        packed_weight = packed_linear.pack(weight)
        calls.append(lambda rows: packed_linear.linear(rows, packed_weight, bias))
    reference, shifted = F.linear(x, weight, bias), _misaligned_copy(x)
    num_rows = _rows_tried(out_features) if dtype != torch.float32 else 1
    agree = [
        all(
            _agrees(call, x, reference, m, num_rows) and _agrees(call, shifted, reference, m, 1)
            for call in calls
        )
        for m in ROW_SIZES
    ]
    return _served_sizes(agree, in_features, out_features, threads, dtype)


PROBE_OUTPUTS = 1 << 18  # outputs a 16-bit probe compares at each call size


def _rows_tried(out_features: int) -> int:
    """How many rows a 16-bit probe tries at each call size (`_agrees`): about PROBE_OUTPUTS outputs,
    at most every row. A 16-bit output shows a kernel's other order of addition only where a sum
    lies near a rounding boundary, a few outputs in ten thousand even with cancelling operands
    (measured: SmolLM2's 1536 -> 576 layer in oneDNN's one-row kernel against its kernel for two or
    more rows, on the model's activations one output in 576 in a quarter of decode steps; a probe of
    the first row alone served one row)."""
    return min(ROW_SIZES[-1], -(-PROBE_OUTPUTS // out_features))


def _agrees(
    call: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    reference: torch.Tensor,
    m: int,
    num_rows: int,
) -> bool:
    """Whether calls of m rows of x, over its first `num_rows` rows (at least one call), give
    `reference`'s bits."""
    starts = range(0, max(num_rows, m) - m + 1, m)
    return all(torch.equal(call(x[i : i + m]), reference[i : i + m]) for i in starts)


def _probe_operands(
    in_features: int, out_features: int, dtype: torch.dtype, has_bias: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """A weight (out, in), a bias or None and ROW_SIZES[-1] input rows for the row-count probe.

    In fp32 every output keeps its accumulation's last bits, so random operands show a kernel
    that sums in another order. A bf16 output is rounded to 8 bits, which hides such a difference
    unless the sum sits near a rounding boundary: measured with oneDNN's AVX-512 emulation of bf16,
    SmolLM2's 576 -> 576 packed layer agreed at one row on random operands but not on the model's
    own activations. So in a 16-bit dtype the rows are one base row plus perturbations of scales
    2^0 .. 2^-11, and the weight's last column cancels each output's share of the base row: every
    output is a small difference of large products, whose rounding shows its order of addition."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=generator)
    bias = torch.randn(out_features, generator=generator) if has_bias else None
    x = torch.randn(ROW_SIZES[-1], in_features, generator=generator)
    if dtype != torch.float32 and in_features > 1:
        base = torch.randn(in_features, generator=generator).to(dtype).float()
        base[-1] = 1.0
        weight[:, -1] = -(weight[:, :-1] @ base[:-1])
        scales = 2.0 ** -torch.randint(0, 12, (ROW_SIZES[-1], 1), generator=generator)
        x = base + scales * x
    return weight.to(dtype), None if bias is None else bias.to(dtype), x.to(dtype)


def _served_sizes(
    agree: list[bool], in_features: int, out_features: int, threads: int, dtype: torch.dtype
) -> tuple[int, ...]:
    """The sizes of `ROW_SIZES` whose probe agreed, or why none can serve."""
    sizes = tuple(m for m, ok in zip(ROW_SIZES, agree) if ok)
    layer = f"{str(dtype).removeprefix('torch.')} {in_features}->{out_features} linear layer"
    if not sizes:
        raise BatchInvarianceUnavailable(
            f"with {threads} threads this machine's kernels give a {layer} other bits from call to call "
            "or at another buffer alignment; batch-invariant numerics need fewer threads "
            "(--threads 1) or --fast-numerics"
        )
    if sizes[0] > MAX_THRESHOLD:
        regimes = [m for m, ok in zip(ROW_SIZES, agree) if not ok]
        raise BatchInvarianceUnavailable(
            f"with {threads} threads this machine's kernels round the rows of a {layer} "
            f"differently for calls of {regimes} rows than for {ROW_SIZES[-1]}; batch-invariant numerics "
            f"need fewer threads (--threads 1) or --fast-numerics"
        )
    return sizes


def _misaligned_copy(x: torch.Tensor) -> torch.Tensor:
    """x's values in a buffer one element off the allocator's alignment: every call size is probed a
    second time there, so a BLAS whose bits change with alignment, or from call to call, is caught
    at start-up rather than in the tokens."""
    buffer = torch.empty(x.numel() + 1, dtype=x.dtype)
    shifted = buffer[1:].view(x.shape)
    shifted.copy_(x)
    return shifted


@functools.cache
def invariant_query_rows(head_dim: int, threads: int) -> int:
    """The fewest query rows from which attention's batched products (scores over the head dim, then
    probabilities times values over one block) give each row the same bits as with more rows,
    probed at `threads` threads (the current count)."""
    if threads != torch.get_num_threads():
        raise ValueError(f"probe at the current thread count ({torch.get_num_threads()}), not {threads}")
    generator = torch.Generator().manual_seed(0)
    most = 32
    q, keys = (
        torch.randn(4, most, head_dim, generator=generator),
        torch.randn(4, head_dim, 2 * BLOCK, generator=generator),
    )
    p, values = (
        torch.randn(4, most, BLOCK, generator=generator),
        torch.randn(4, BLOCK, head_dim, generator=generator),
    )
    scores, weighted = q @ keys, p @ values
    agree = [
        torch.equal(q[:, :m] @ keys, scores[:, :m]) and torch.equal(p[:, :m] @ values, weighted[:, :m])
        for m in range(1, most + 1)
    ]
    first = next(i for i in range(most) if all(agree[i:]))
    if first + 1 > MAX_THRESHOLD // 2:
        raise BatchInvarianceUnavailable(
            f"with {threads} threads attention products over head dim {head_dim} "
            "agree only from many query rows; use --fast-numerics"
        )
    return first + 1


def padded_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, sizes: tuple[int, ...]
) -> torch.Tensor:
    """F.linear over x (..., K), every call made with a row count in `sizes` (`padded_rows`)."""
    return padded_rows(x, lambda rows: F.linear(rows, weight, bias), sizes)


def padded_rows(
    x: torch.Tensor, matmul: Callable[[torch.Tensor], torch.Tensor], sizes: tuple[int, ...]
) -> torch.Tensor:
    """matmul over x (..., K) -> (..., N), every call made with a row count in `sizes` (ascending):
    zero rows pad the last call up to the next size; more rows than the largest are cut into calls
    of it."""
    flat = x.reshape(-1, x.shape[-1])
    rows, largest = flat.shape[0], sizes[-1]
    calls = [_padded_call(flat[start : start + largest], matmul, sizes) for start in range(0, rows, largest)]
    out = calls[0] if len(calls) == 1 else torch.cat(calls)
    return out.reshape(*x.shape[:-1], -1)


def _padded_call(
    rows: torch.Tensor, matmul: Callable[[torch.Tensor], torch.Tensor], sizes: tuple[int, ...]
) -> torch.Tensor:
    n = rows.shape[0]
    size = next(m for m in sizes if m >= n)
    if size == n:
        return matmul(rows)
    return matmul(F.pad(rows, (0, 0, 0, size - n)))[:n]


def round_up(length: int) -> int:
    return -(-length // BLOCK) * BLOCK


def block_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    min_rows: int,
    order: ChainOrder | None = None,
) -> torch.Tensor:
    """Softmax attention, batch-invariant.

    q (b, H, T, D); keys, values (b, Hkv, L, D) with L a multiple of BLOCK; mask (b, 1, T, L) True
    where a query may attend (every query sees at least one key) -> (b, H, T, D). With `order` (trees),
    each query reads the keys in its chain order and `mask` is in that order too (`chain_mask`).

    The sum over blocks relies on torch's CPU cumsum adding in order (it keeps only the last prefix
    sum, ~3 % of a SmolLM2 decode step, where a Python loop over blocks cost more). Another device's
    scan may group the additions otherwise: there the invariance is unproven until tested.
    """
    dtype = q.dtype  # bf16 and fp16 attend in fp32, as fused attention kernels accumulate: one probe
    q, keys, values = q.float(), keys.float(), values.float()  # (`invariant_query_rows`) covers all
    b, H, T, D = q.shape
    Hkv, L = keys.shape[1], keys.shape[2]
    G, M = H // Hkv, H // Hkv * T  # M query rows per kv head, ordered (group member, token)
    rows = max(M, min_rows)
    queries = F.pad((q * D**-0.5).reshape(b, Hkv, M, D), (0, 0, 0, rows - M))
    scores = queries @ keys.transpose(-1, -2)  # (b, Hkv, rows, L): each a dot over D
    if order is not None:
        scores = scores.gather(-1, order.query_columns(G, rows).expand(-1, Hkv, -1, -1))
    scores = scores.masked_fill(~_row_mask(mask, G, rows), float("-inf"))
    probs = torch.exp(scores - scores.amax(-1, keepdim=True))  # unnormalised; the max is exact in any order
    blocks = probs.reshape(b, Hkv, rows, L // BLOCK, BLOCK)
    # one (rows x BLOCK) @ (BLOCK x D) product per block, then a running sum over blocks in order:
    # cumsum adds sequentially, and blocks past a row's context add exact zeros
    partial = blocks.transpose(2, 3) @ values.reshape(b, Hkv, L // BLOCK, BLOCK, D)  # (b, Hkv, nb, rows, D)
    if order is not None:
        _tails_in_chain_order(partial, probs, values, order, G, min_rows)
    weighted = partial.cumsum(2)[:, :, -1]  # (b, Hkv, rows, D)
    total = blocks.sum(-1).cumsum(-1)[..., -1:]  # (b, Hkv, rows, 1)
    return (weighted / total)[:, :, :M].reshape(b, H, T, D).to(dtype)


def _row_mask(mask: torch.Tensor, G: int, rows: int) -> torch.Tensor:
    """(b, 1, T, L) -> (b, 1, rows, L) in the query-row order of `block_attention`; padding rows
    see every key."""
    b, _, T, L = mask.shape
    expanded = mask[:, :, None].expand(b, 1, G, T, L).reshape(b, 1, G * T, L)
    return F.pad(expanded, (0, 0, 0, rows - G * T), value=True)


def _tails_in_chain_order(
    partial: torch.Tensor, probs: torch.Tensor, values: torch.Tensor, order: ChainOrder, G: int, min_rows: int
) -> None:
    """Recompute, in place, each row's tail blocks of `partial` (b, Hkv, nb, rows, D) with every node's
    own values in chain order: the same (rows x BLOCK) @ (BLOCK x D) products a chain runs, at least
    `min_rows` query rows each."""
    b, Hkv, L, D = values.shape
    T, nt = order.columns.shape[1], order.num_tail_blocks
    M, width = G * T, nt * BLOCK
    chain = order.tail_columns  # (b, width)
    # whole rows of D values by one index_select (an elementwise gather over D cost three times as much)
    tail_values = values.reshape(-1, D).index_select(0, order.tail_rows(Hkv)).reshape(b, Hkv, T, nt, BLOCK, D)
    tail_probs = probs[:, :, :M].gather(-1, chain[:, None, None].expand(b, Hkv, M, width))
    # (b, Hkv, T, nt, G, BLOCK): each node's G query rows, per tail block
    tail_probs = tail_probs.reshape(b, Hkv, G, T, nt, BLOCK).permute(0, 1, 3, 4, 2, 5)
    tail_probs = F.pad(tail_probs, (0, 0, 0, max(G, min_rows) - G))
    products = (tail_probs @ tail_values)[..., :G, :]  # (b, Hkv, T, nt, G, D)
    products = products.permute(0, 1, 3, 4, 2, 5).reshape(b, Hkv, nt, M, D)  # rows (member, token)
    blocks = order.tail_start[:, None] + torch.arange(nt, device=values.device)  # (b, nt)
    partial[:, :, :, :M].scatter_(2, blocks[:, None, :, None, None].expand(b, Hkv, nt, M, D), products)
