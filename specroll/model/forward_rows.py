"""A forward's inputs row by row: packed on the host into one integer array, copied to the device in
one transfer, and unpacked there into what the model reads (`ForwardBatch`: tokens, positions, the
cache-write index, the logit rows).

Both forwards go through here and differ only in where rows sit: the dynamic one
(`ModelRunner.prepare`) puts its i-th sequence in row i and is as wide as its widest row; a static one
(`model.static_forward`) puts each sequence in the row of its cache slot, padded to its bucket's rows
and width. What stays apart is attention, which is not the same concept in the two: the dynamic
forward cuts its rows into spans that each read only as far as their own longest row, with a chain
mask, a tree mask or chain order (`model.attention_chunks`, `model.chain_order`), while a static one
must not depend on the data, so it reads its bucket's whole length in one span with the tree mask (a
chain is a tree) built inside the recorded graph.

Columns of a row: start, num_new, num_logits, order (row i: the row of the forward's i-th sequence),
then tokens (T), depth (T) and, for a forward that may hold a tree, relation (T x T). A row with no
sequence is padding: no new tokens, so each token it holds writes the cache's scratch column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from specroll.model.kv_cache import KVCache
from specroll.model.masks import tree_layout
from specroll.model.transformer import AttentionSpan, ForwardBatch

START, NUM_NEW, NUM_LOGITS, ORDER, TOKENS = 0, 1, 2, 3, 4


def num_columns(T: int, with_relation: bool) -> int:
    return TOKENS + 2 * T + (T * T if with_relation else 0)


def pack(sequences: Sequence, rows: Sequence[int], num_rows: int, T: int, with_relation: bool) -> np.ndarray:
    """(num_rows, columns) int64 on the host: sequence i (a `SequenceInput`) in row rows[i], the other
    rows padding. O(new tokens) Python work, plus a walk of each tree (`masks.tree_layout`)."""
    packed = np.zeros((num_rows, num_columns(T, with_relation)), dtype=np.int64)
    packed[:, TOKENS + T : TOKENS + 2 * T] = np.arange(T)  # a chain's new token t is at depth t
    if with_relation:
        packed[:, TOKENS + 2 * T :] = np.tril(np.ones((T, T), dtype=np.int64)).reshape(-1)
    for i, (s, r) in enumerate(zip(sequences, rows)):
        n, row = len(s.token_ids), packed[r]
        row[[START, NUM_NEW, NUM_LOGITS]] = s.start, n, s.num_logits
        row[TOKENS : TOKENS + n] = s.token_ids
        if s.parents is not None:
            depth, relation = tree_layout(s.parents, T, s.slot)
            row[TOKENS + T : TOKENS + 2 * T] = depth.numpy()
            row[TOKENS + 2 * T :] = relation.reshape(-1).numpy()
        elif with_relation:
            row[TOKENS + 2 * T :].reshape(T, T)[:, n:] = 0  # a chain's query t sees new tokens <= t, < n
        packed[i, ORDER] = r
    return packed


@dataclass(frozen=True)
class Rows:
    """A forward's packed inputs, unpacked on the device (R rows of T new tokens, padding included)."""

    start: torch.Tensor  # (R,) positions already cached
    num_new: torch.Tensor  # (R,) new tokens; 0 in a padding row
    num_logits: torch.Tensor  # (R,) trailing new tokens that need logits
    token_ids: torch.Tensor  # (R, T) the new tokens, padded with 0
    depth: torch.Tensor  # (R, T) each new token's depth below the context
    relation: torch.Tensor | None  # (R, T, T) bool: query t sees new token u; None when packed without


def unpack(packed: torch.Tensor, T: int) -> Rows:
    """packed (R, columns) long on the device -> its `Rows` (views of it; no host synchronisation)."""
    R = packed.shape[0]
    relation = None
    if packed.shape[1] > TOKENS + 2 * T:
        relation = packed[:, TOKENS + 2 * T :].reshape(R, T, T).bool()
    return Rows(
        packed[:, START],
        packed[:, NUM_NEW],
        packed[:, NUM_LOGITS],
        packed[:, TOKENS : TOKENS + T],
        packed[:, TOKENS + T : TOKENS + 2 * T],
        relation,
    )


def forward_batch(
    rows: Rows,
    cache: KVCache,
    slots: torch.Tensor,
    spans: list[AttentionSpan],
    num_positions: int,
    num_logit_rows: int,
) -> ForwardBatch:
    """The model's inputs from the rows: row r's tokens go to cache slot slots[r] (R,), and
    `num_logit_rows` of them produce logits. Attention (`spans`) and the bound on positions are the
    caller's."""
    return ForwardBatch(
        write_index=cache.write_index(slots, write_columns(rows, cache.scratch_column)),
        input_ids=rows.token_ids,
        positions=rows.start[:, None] + rows.depth,
        num_positions=num_positions,
        spans=spans,
        logit_index=logit_index(rows, num_logit_rows),
    )


def write_columns(rows: Rows, scratch_column: int) -> torch.Tensor:
    """(R, T): the cache column each new token's K/V is written to; a padding token writes the
    scratch column, which no query reads."""
    offsets = torch.arange(rows.token_ids.shape[1], device=rows.start.device)
    is_new = offsets[None] < rows.num_new[:, None]
    return torch.where(is_new, rows.start[:, None] + offsets, scratch_column)


def logit_index(rows: Rows, width: int) -> torch.Tensor:
    """(R, width): row r's num_logits trailing new tokens, then its last one again as padding (a
    padding row reads its token 0)."""
    offsets = torch.arange(width, device=rows.start.device)
    last = rows.num_new[:, None] - 1
    return torch.minimum(last - rows.num_logits[:, None] + 1 + offsets, last).clamp(min=0)
