"""Trees under batch-invariant numerics: every tree node reads its keys where a chain would hold them.

A tree's new tokens are written to cache columns start, start + 1, ... in the order they were
drafted, so a node at depth d finds its ancestors at scattered columns. Batch-invariant attention
(`batch_invariant.block_attention`) sums over fixed blocks of columns, and the rounding of a block's
products depends on where in the block each key sits: for a node to get the very bits that plain
decoding of its path gets, it must read that path's keys at columns start .. start + d, in order.
`ChainOrder` names, for each node, the cache column behind each of those chain columns.

Only the blocks that hold new tokens (each row's *tail*: at most `num_tail_blocks`, from the block of
its first new token) differ between the nodes of one row: attention rearranges its scores by one
gather and gathers values per node for the tail alone. Built on the device from per-row tensors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from specroll.model.batch_invariant import BLOCK


@dataclass(frozen=True)
class ChainOrder:
    """One span's chain order; the indices attention derives from it are built once, at the first
    layer, and kept for the others."""

    columns: torch.Tensor  # (b, T, L) long: the cache column node t reads at chain column j
    tail_start: torch.Tensor  # (b,) long: each row's first tail block
    num_tail_blocks: int
    _built: dict = field(default_factory=dict, compare=False, repr=False)

    @functools.cached_property
    def tail_columns(self) -> torch.Tensor:
        """(b, tail width): the chain columns of each row's tail blocks."""
        width = torch.arange(self.num_tail_blocks * BLOCK, device=self.tail_start.device)
        return self.tail_start[:, None] * BLOCK + width

    def query_columns(self, G: int, rows: int) -> torch.Tensor:
        """(b, 1, rows, L): the columns of each of attention's query rows (G per node, ordered
        (group member, node), then padding rows, which read in place)."""
        if ("query", G, rows) not in self._built:
            b, T, L = self.columns.shape
            nodes = self.columns[:, None, None].expand(b, 1, G, T, L).reshape(b, 1, G * T, L)
            in_place = torch.arange(L, device=self.columns.device).expand(b, 1, rows - G * T, L)
            self._built["query", G, rows] = torch.cat([nodes, in_place], 2)
        return self._built["query", G, rows]

    def tail_rows(self, num_kv_heads: int) -> torch.Tensor:
        """(b * Hkv * T * tail width,): for each kv head and node, the rows of a (b, Hkv, L, D) cache
        read, flattened to (b * Hkv * L, D), that hold its tail's keys or values in chain order."""
        if ("tail", num_kv_heads) not in self._built:
            b, T, L = self.columns.shape
            width = self.tail_columns.shape[1]
            cache = self.columns.gather(-1, self.tail_columns[:, None].expand(b, T, width))  # (b, T, width)
            base = torch.arange(b * num_kv_heads, device=cache.device).reshape(b, num_kv_heads, 1) * L
            self._built["tail", num_kv_heads] = (base + cache.reshape(b, 1, T * width)).reshape(-1)
        return self._built["tail", num_kv_heads]


def num_tail_blocks(width: int, read_length: int) -> int:
    """Blocks that can hold a row's `width` new tokens (they may straddle a block boundary)."""
    return min(read_length // BLOCK, (width - 1) // BLOCK + 2)


def chain_order(
    start: torch.Tensor, depth: torch.Tensor, relation: torch.Tensor, read_length: int
) -> ChainOrder:
    """start (b,) cached positions; depth (b, T) and relation (b, T, T) of the new tokens
    (`masks.tree_layout`; a chain is a tree too); read_length L a multiple of BLOCK."""
    b, T = depth.shape
    device = start.device
    offsets = torch.arange(T, device=device)
    # node t's path, root first: the new tokens it sees, in drafting order (parents precede children)
    path = torch.where(relation, offsets, T).sort(-1).values  # (b, T, T), T past the path's end
    chain = torch.arange(read_length, device=device)
    below = chain[None] - start[:, None]  # (b, L): a chain column's depth below the context
    on_path = (below[:, None] >= 0) & (below[:, None] <= depth[..., None])  # (b, T, L)
    step = path.gather(-1, below.clamp(0, T - 1)[:, None].expand(b, T, read_length))
    columns = torch.where(on_path, start[:, None, None] + step, chain).clamp(max=read_length - 1)
    tail = num_tail_blocks(T, read_length)
    tail_start = torch.clamp(start // BLOCK, max=read_length // BLOCK - tail)
    return ChainOrder(columns, tail_start, tail)


def chain_mask(start: torch.Tensor, depth: torch.Tensor, read_length: int) -> torch.Tensor:
    """(b, 1, T, L): in chain order, node t sees the context and its path, columns up to start + depth."""
    chain = torch.arange(read_length, device=start.device)
    return (chain[None, None] <= (start[:, None] + depth)[..., None])[:, None]
