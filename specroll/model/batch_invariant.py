"""Batch-invariant numerics: a row's logits do not depend, to the bit, on the forward it is part of.

Exact mode draws a token by inverting the CDF of the target's distribution at a keyed uniform, so
a request's tokens are a function of its logits alone. Logits of one row differ between forwards of
different shapes, though, by the rounding of reductions done in a different order: on a 49,152-token
vocabulary a difference of ~1e-5 in a logit moves CDF boundaries of tail tokens past the uniform
often enough that a third of 200-token requests changed between speculative and plain decoding.
Here every reduction a row goes through is made independent of the rest of the forward:

- Linear layers: BLAS computes a row of `x @ W.T` with the same kernel, and the same bits, for any
  number of rows from a small threshold up (measured on x86 with one thread: 1, 2-3 and >= 4 rows
  are three regimes). Forwards with fewer rows are padded up to the threshold, which is probed
  once per process (`min_invariant_rows`).
- Attention: keys are processed in fixed blocks of `BLOCK` positions. Scores and the
  probability-weighted values are matmuls whose reduction is over a fixed length (the head dim, then
  one block), each query one of >= `min_rows` rows; the softmax maximum is exact in any order; the
  sums over blocks run over a middle dimension whose inner size is a multiple of `BLOCK`, where
  trailing all-masked blocks add exact zeros. So neither the read length of the batch, nor how many
  queries a row has (decode or verification width), nor the other rows change a row's output.
  (PyTorch's fused attention differs by ~1e-7 between 1 and 2 queries or one more masked key.)
- Elementwise maps (exp, SiLU, rotary cos/sin) run on tensors whose sizes are multiples of the
  vector width, so no element falls into a scalar tail loop with different rounding.

Measured, not assumed: `tests/model/test_batch_invariance.py` checks bitwise equality of logits
across batch sizes, widths and read lengths, and the engine tests check token identity.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

BLOCK = 64  # key positions per attention block; read lengths are rounded up to a multiple of it
_PROBE_ROWS = (*range(1, 25), 32, 48, 64)


@functools.cache
def min_invariant_rows(in_features: int = 576, out_features: int = 1536) -> int:
    """The fewest rows from which a linear layer's row results no longer depend on the row count,
    probed on this machine's BLAS with the current thread count."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=generator)
    x = torch.randn(max(_PROBE_ROWS), in_features, generator=generator)
    reference = F.linear(x, weight)
    agree = [torch.equal(F.linear(x[:m], weight), reference[:m]) for m in _PROBE_ROWS]
    for i, m in enumerate(_PROBE_ROWS):
        if all(agree[i:]):
            return m
    raise RuntimeError("this BLAS gives no row-count-invariant linear layer; use --fast-numerics")


def padded_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  min_rows: int) -> torch.Tensor:
    """F.linear over x (..., K) computed with at least `min_rows` rows (zero rows appended)."""
    rows = x.numel() // x.shape[-1]
    if rows >= min_rows:
        return F.linear(x, weight, bias)
    flat = F.pad(x.reshape(rows, -1), (0, 0, 0, min_rows - rows))
    return F.linear(flat, weight, bias)[:rows].reshape(*x.shape[:-1], -1)


def round_up(length: int) -> int:
    return -(-length // BLOCK) * BLOCK


def block_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                    min_rows: int) -> torch.Tensor:
    """Softmax attention, batch-invariant.

    q (b, H, T, D); keys, values (b, Hkv, L, D) with L a multiple of BLOCK; mask (b, 1, T, L) True
    where a query may attend (every query sees at least one key) -> (b, H, T, D).
    """
    b, H, T, D = q.shape
    Hkv, L = keys.shape[1], keys.shape[2]
    G, M = H // Hkv, H // Hkv * T  # M query rows per kv head, ordered (group member, token)
    rows = max(M, min_rows)
    queries = F.pad((q * D ** -0.5).reshape(b, Hkv, M, D), (0, 0, 0, rows - M))
    scores = queries @ keys.transpose(-1, -2)  # (b, Hkv, rows, L): each a dot over D
    scores = scores.masked_fill(~_row_mask(mask, G, rows), float("-inf"))
    probs = torch.exp(scores - scores.amax(-1, keepdim=True))  # unnormalised; the max is exact in any order
    weighted, total = 0.0, 0.0
    for start in range(0, L, BLOCK):  # fixed order; blocks past a row's context add exact zeros
        block = probs[..., start:start + BLOCK]  # (b, Hkv, rows, BLOCK)
        weighted = weighted + block @ values[:, :, start:start + BLOCK]  # (b, Hkv, rows, D)
        total = total + block.sum(-1, keepdim=True)  # (b, Hkv, rows, 1)
    return (weighted / total)[:, :, :M].reshape(b, H, T, D)


def _row_mask(mask: torch.Tensor, G: int, rows: int) -> torch.Tensor:
    """(b, 1, T, L) -> (b, 1, rows, L) in the query-row order of `block_attention`; padding rows
    see every key."""
    b, _, T, L = mask.shape
    expanded = mask[:, :, None].expand(b, 1, G, T, L).reshape(b, 1, G * T, L)
    return F.pad(expanded, (0, 0, 0, rows - G * T), value=True)
