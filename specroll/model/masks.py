"""Which key each new token's query may attend to, in a forward whose sequences add new tokens
(a chain, or a tree of drafts) to their cached context. Built on the device from per-row tensors, so
a captured forward builds them inside the graph."""

from __future__ import annotations

from typing import Sequence

import torch


def depths(parents: Sequence[int]) -> list[int]:
    """Each new token's depth below the first (parents[i] indexes token i's parent, -1 for the cached
    context, parents before children): its position past the context is the context's length plus it."""
    depth: list[int] = []
    for parent in parents:
        depth.append(0 if parent < 0 else depth[parent] + 1)
    return depth


def tree_layout(parents: Sequence[int], T: int, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A tree of new tokens (parents[i] indexes token i's parent, -1 for the cached context) as
    depth (T,) below the context (`depths`) and relation (T, T): token t sees token u. Walked on the
    host."""
    relation = torch.zeros(T, T, dtype=torch.bool, device="cpu")
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"slot {slot}: parent {parent} of draft token {i} must precede it")
        if parent >= 0:
            relation[i] = relation[parent]
        relation[i, i] = True
    depth = torch.zeros(T, dtype=torch.long, device="cpu")
    depth[: len(parents)] = torch.tensor(depths(parents), dtype=torch.long, device="cpu")
    return depth, relation


def attention_mask(
    start: torch.Tensor, num_new: torch.Tensor, relation: torch.Tensor, read_length: int
) -> torch.Tensor:
    """(B, 1, T, L): cached positions are visible to all; new ones as `relation` says."""
    T = relation.shape[1]
    rel = (
        torch.arange(read_length, device=start.device)[None] - start[:, None]
    )  # (B, L) offset among new tokens
    is_cached = rel < 0
    is_new = (rel >= 0) & (rel < num_new[:, None])
    sees_new = torch.gather(relation, 2, rel.clamp(0, T - 1)[:, None, :].expand(-1, T, -1))  # (B, T, L)
    mask = is_cached[:, None, :] | (is_new[:, None, :] & sees_new)
    is_padding = torch.arange(T, device=start.device)[None] >= num_new[:, None]  # (B, T)
    mask[..., 0] |= is_padding  # padded queries see one key so softmax stays finite
    return mask[:, None]
