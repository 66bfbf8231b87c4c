"""A static, preallocated key/value cache: one row (slot) per running sequence.

Each slot holds `capacity` positions plus one scratch column that padded tokens write into and no
query ever reads. Which slot belongs to which request, and how many positions of it are valid, is
the engine's bookkeeping; the cache only stores tensors. Rolling back rejected draft tokens is
therefore free: the engine lowers the sequence's length and later writes overwrite the stale rows.
"""

from __future__ import annotations

import torch

from specroll.model.config import ModelConfig


class KVCache:
    def __init__(self, config: ModelConfig, num_slots: int, capacity: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
        if num_slots <= 0 or capacity <= 0:
            raise ValueError(f"KV cache needs positive slots and capacity, got {num_slots}, {capacity}")
        self.num_slots = num_slots
        self.capacity = capacity
        shape = (num_slots, config.num_kv_heads, capacity + 1, config.head_dim)  # (S, Hkv, C+1, D)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]

    @property
    def scratch_column(self) -> int:
        return self.capacity

    def write(self, layer: int, slots: torch.Tensor, columns: torch.Tensor,
              keys: torch.Tensor, values: torch.Tensor) -> None:
        """slots (B,), columns (B, T), keys/values (B, Hkv, T, D): store each new token's K/V."""
        rows = slots[:, None].expand_as(columns)
        self.keys[layer][rows, :, columns] = keys.transpose(1, 2)
        self.values[layer][rows, :, columns] = values.transpose(1, 2)

    def read(self, layer: int, slots: torch.Tensor | slice, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` positions of each slot: keys, values each (B, Hkv, length, D).

        A slice of consecutive slots reads a view; a tensor of slots gathers a copy.
        """
        return self.keys[layer][slots, :, :length], self.values[layer][slots, :, :length]

    def copy_slot(self, source: int, target: int, length: int) -> None:
        """Copy the first `length` positions of one slot into another."""
        for keys, values in zip(self.keys, self.values):
            keys[target, :, :length] = keys[source, :, :length]
            values[target, :, :length] = values[source, :, :length]

    def move(self, slot: int, source_columns: list[int], target_columns: list[int]) -> None:
        """Copy K/V between columns of one slot (compacting an accepted tree path)."""
        src = torch.tensor(source_columns)
        dst = torch.tensor(target_columns)
        for keys, values in zip(self.keys, self.values):
            keys[slot, :, dst] = keys[slot, :, src]
            values[slot, :, dst] = values[slot, :, src]
