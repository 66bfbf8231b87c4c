"""A tree node's path laid out as a chain: what plain decoding of that path reads, for checking that
a tree node's attention gets the chain's bits."""

from __future__ import annotations

import torch

TREE = [-1, -1, 0, 0, 1, 2, 2, 4, 7, 3]  # two roots, branching below both, up to 4 deep


def chain_of_path(keys: torch.Tensor, values: torch.Tensor, start: int, path: list[int], block: int = 64):
    """Row 0 of a tree's cache read (keys, values (b, Hkv, L, D), the tree's tokens from column
    `start`) as plain decoding of `path` would hold it: the context, then the path's keys in order, then
    other values up to a block boundary -> (keys, values (1, Hkv, length, D), mask (1, 1, 1, length))."""
    _, Hkv, _, D = keys.shape
    length = -(-(start + len(path)) // block) * block
    chain_keys, chain_values = torch.randn(1, Hkv, length, D), torch.randn(1, Hkv, length, D)
    chain_keys[..., :start, :], chain_values[..., :start, :] = keys[:1, :, :start], values[:1, :, :start]
    chain_keys[..., start : start + len(path), :] = keys[:1, :, [start + u for u in path]]
    chain_values[..., start : start + len(path), :] = values[:1, :, [start + u for u in path]]
    mask = torch.zeros(1, 1, 1, length, dtype=torch.bool)
    mask[..., : start + len(path)] = True
    return chain_keys, chain_values, mask
