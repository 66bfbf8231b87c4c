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
    def __init__(
        self,
        config: ModelConfig,
        num_slots: int,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        column_multiple: int = 1,
    ) -> None:
        """column_multiple: allocate columns (capacity + scratch) rounded up to a multiple of this, so
        reads may be rounded up too (block attention); the extra columns are never written."""
        if num_slots <= 0 or capacity <= 0:
            raise ValueError(f"KV cache needs positive slots and capacity, got {num_slots}, {capacity}")
        self.num_slots = num_slots
        self.capacity = capacity
        self.num_kv_heads = config.num_kv_heads
        self.num_columns = -(-(capacity + 1) // column_multiple) * column_multiple
        shape = (num_slots, config.num_kv_heads, self.num_columns, config.head_dim)  # (S, Hkv, C+1+, D)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)]

    @property
    def scratch_column(self) -> int:
        return self.capacity

    def write_index(self, slots: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """slots (B,), columns (B, T) -> (B*Hkv*T,) rows of the flattened cache, in (b, head, t) order.

        Computed once per forward and shared by every layer's write."""
        heads = torch.arange(self.num_kv_heads, device=slots.device)
        rows = (slots[:, None, None] * self.num_kv_heads + heads[None, :, None]) * self.num_columns
        return (rows + columns[:, None, :]).reshape(-1)

    def write(self, layer: int, index: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """keys/values (B, Hkv, T, D): store each new token's K/V at `write_index` rows."""
        D, dtype = keys.shape[-1], self.keys[layer].dtype  # a 16-bit model's K/V widen into an fp32 cache
        self.keys[layer].view(-1, D).index_copy_(0, index, keys.reshape(-1, D).to(dtype))
        self.values[layer].view(-1, D).index_copy_(0, index, values.reshape(-1, D).to(dtype))

    def read(self, layer: int, slots: torch.Tensor | slice, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `length` positions of each slot: keys, values each (B, Hkv, length, D).

        A slice of consecutive slots reads a view; a tensor of slots gathers a copy.
        """
        return self.keys[layer][slots, :, :length], self.values[layer][slots, :, :length]

    def move_slots(self, sources: list[int], targets: list[int], length: int) -> None:
        """Copy the first `length` positions of slot sources[i] into slot targets[i], for every i at
        once: each source is read before any target is written, so the lists may overlap (a
        permutation)."""
        if not sources:
            return
        device = self.keys[0].device
        src, dst = torch.tensor(sources, device=device), torch.tensor(targets, device=device)
        for keys, values in zip(self.keys, self.values):
            keys[dst, :, :length] = keys[src, :, :length]
            values[dst, :, :length] = values[src, :, :length]

    def move(self, slot: int, source_columns: list[int], target_columns: list[int]) -> None:
        """Copy K/V between columns of one slot (compacting an accepted tree path)."""
        src = torch.tensor(source_columns, device=self.keys[0].device)
        dst = torch.tensor(target_columns, device=self.keys[0].device)
        for keys, values in zip(self.keys, self.values):
            keys[slot, :, dst] = keys[slot, :, src]
            values[slot, :, dst] = values[slot, :, src]
