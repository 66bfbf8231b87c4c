"""Splitting a forward's rows into contiguous chunks that each read only as far as their longest row.

Attention over a batch reads every row's cache up to the batch's longest context, so in a batch
mixing long and short requests much of what is read is padding (measured on the bundled rollout at
batch 32: rows use 64% of what a single padded read covers). Rows are split into at most
`max_chunks` contiguous ranges, each attended separately up to its own longest row. Contiguous,
because consecutive cache slots are read as a view and any other set of rows would be gathered, a
copy as costly as the read it saves. Engine slots come roughly in admission order, so older, longer
requests sit together and few cuts recover most of the padding (4 chunks: 65%, the optimum of any
4 contiguous chunks is 64.9%).

Cuts are chosen greedily: repeatedly make the single cut that saves the most row-positions, while it
saves at least `min_saving` of them (each chunk costs one more attention call per layer). No cut can save
more than rows x (longest - shortest), so a batch of near-equal rows (every one-token draft forward, most
decode steps) is answered without a search; the search itself is vectorised, as it runs on every forward.
Imports no torch. The same planner, over lengths sorted longest first, splits the engine's prefills and
the draft model's catch-ups into forwards of similar lengths, where the padding is whole tokens' compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Chunk:
    first: int  # first row
    end: int  # one past the last row
    read_length: int  # the longest row's context: cache positions this chunk reads

    @property
    def num_rows(self) -> int:
        return self.end - self.first

    @property
    def positions_read(self) -> int:
        return self.num_rows * self.read_length


def plan_chunks(lengths: Sequence[int], max_chunks: int = 4, min_saving: int = 512) -> list[Chunk]:
    """lengths[i]: positions row i attends to (cached + new). Returns chunks covering every row in order."""
    if not lengths:
        raise ValueError("plan_chunks needs at least one row")
    if max_chunks < 1:
        raise ValueError(f"max_chunks must be >= 1, got {max_chunks}")
    chunks = [Chunk(0, len(lengths), max(lengths))]
    if max_chunks == 1 or len(lengths) * (max(lengths) - min(lengths)) < max(min_saving, 1):
        return chunks  # no cut could save enough
    lengths = np.asarray(lengths, dtype=np.int64)
    cuts = {chunks[0]: _best_cut(lengths, chunks[0])}
    while len(chunks) < max_chunks:
        chunk = max(chunks, key=lambda c: cuts[c][0])
        saving, left, right = cuts[chunk]
        if saving < max(min_saving, 1):
            break
        at = chunks.index(chunk)
        chunks[at : at + 1] = [left, right]
        cuts.update({left: _best_cut(lengths, left), right: _best_cut(lengths, right)})
    return chunks


def _best_cut(lengths: np.ndarray, chunk: Chunk) -> tuple[int, Chunk | None, Chunk | None]:
    """The one cut of `chunk` that saves the most positions read: (saving, left, right)."""
    rows = lengths[chunk.first : chunk.end]
    if len(rows) < 2:
        return 0, None, None
    prefix_max = np.maximum.accumulate(rows)
    suffix_max = np.maximum.accumulate(rows[::-1])[::-1]
    m = np.arange(1, len(rows))
    costs = m * prefix_max[:-1] + (len(rows) - m) * suffix_max[1:]  # cut before row m of the chunk
    best = int(np.argmin(costs))  # the first of equal costs: the shortest left part
    at = chunk.first + best + 1
    return (
        chunk.positions_read - int(costs[best]),
        Chunk(chunk.first, at, int(prefix_max[best])),
        Chunk(at, chunk.end, int(suffix_max[best + 1])),
    )
