"""Forwards of fixed shapes, the form a CUDA graph can replay: decode and verification forwards, whose
rows add at most `max_width` new tokens to their cached context.

A forward over sequences in cache slots s_1..s_n runs at a `StaticShape` bucket (`model.buckets`):
row r of the forward is cache slot r, for r below the row bucket, so attention reads the cache's first
rows as a view (the scheduler keeps running requests in slots 0..B-1) and no K/V is gathered. A row
with no sequence is padding: it has no new tokens, so every token it holds writes the cache's scratch
column, which no query reads, and it attends to one key so its softmax stays finite. Everything the
forward needs is packed on the host into one integer tensor per step, copied to the device in one
transfer, and unpacked there by the recorded function (`_batch`), masks and cache indices included:
the packing of the dynamic forward (`model.forward_rows`), at the bucket's rows and width.

Row r's results do not depend on the other rows, on padding, or on the read length under the
batch-invariant numerics (`model.batch_invariant`), so there a static forward gives the very bits of
`ModelRunner.prepare`'s dynamic one; with the fast numerics they agree to rounding.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from specroll.model.buckets import StaticShape, static_shape
from specroll.model.cuda_graphs import Replayer
from specroll.model.kv_cache import KVCache
from specroll.model import forward_rows
from specroll.model.masks import attention_mask
from specroll.model.transformer import AttentionSpan, CausalLM, ForwardBatch


class StaticForwards:
    """features(sequences) for forwards of at most `max_width` new tokens a row, at bucketed shapes;
    recorded as CUDA graphs on CUDA, run eagerly elsewhere (`model.cuda_graphs.Replayer`)."""

    def __init__(
        self, model: CausalLM, cache: KVCache, max_width: int, block: int, trees: bool = True
    ) -> None:
        """trees: False sends tree forwards to the dynamic path (under batch-invariant numerics a
        tree's nodes read their keys in chain order, `model.chain_order`, which is not recorded)."""
        if max_width < 1:
            raise ValueError(f"max_width must be >= 1, got {max_width}")
        self.model, self.cache, self.max_width, self.block = model, cache, max_width, block
        self.trees = trees
        self.device = cache.keys[0].device
        self.replayer = Replayer(self.device)
        self.inputs: dict[int, torch.Tensor] = {}  # width -> (slots, packed columns) long, on the device
        # a graph reads the rotary table by address, so it is sized once for every forward the runner
        # may run: a dynamic one reads below max(start) + max(new tokens) <= 2 x the cache's columns
        model.rotary.freeze(2 * cache.num_columns + max_width, self.device)

    def fits(self, sequences: Sequence) -> bool:
        """Few enough new tokens a row, one sequence a slot (each has its slot's row), and trees only
        where they may run here."""
        slots = {s.slot for s in sequences}
        return (
            len(slots) == len(sequences)
            and max(len(s.token_ids) for s in sequences) <= self.max_width
            and (self.trees or all(s.parents is None for s in sequences))
        )

    def features(self, sequences: Sequence) -> torch.Tensor:
        """Final-norm hidden states (n, Tl, H) of the sequences' logit rows, as `CausalLM.features`."""
        shape = self.shape_of(sequences)
        packed = self.load(sequences, shape)
        hidden = self.replayer.run(shape, lambda: self.features_of(packed, shape))  # (R, T, H)
        Tl = max(s.num_logits for s in sequences)
        return hidden.index_select(0, packed[: len(sequences), forward_rows.ORDER])[:, :Tl]

    def shape_of(self, sequences: Sequence) -> StaticShape:
        return static_shape(
            [s.slot for s in sequences],
            [s.start + len(s.token_ids) for s in sequences],
            max(len(s.token_ids) for s in sequences),
            StaticShape(self.cache.num_slots, self.max_width, self.cache.num_columns),
            self.block,
        )

    def load(self, sequences: Sequence, shape: StaticShape) -> torch.Tensor:
        """Copy the sequences' packed inputs into the device buffer of the shape's width: (R, columns)."""
        packed = self._buffer(shape.width)[: shape.num_rows]
        packed.copy_(self.to_device(pack(sequences, shape)), non_blocking=True)
        return packed

    def to_device(self, host: np.ndarray) -> torch.Tensor:
        """A host array as the source of one copy to the device (pinned on CUDA, so it is asynchronous)."""
        tensor = torch.from_numpy(host)
        return tensor.pin_memory() if self.device.type == "cuda" else tensor

    def _buffer(self, width: int) -> torch.Tensor:
        if width not in self.inputs:
            columns = forward_rows.num_columns(width, with_relation=True)
            self.inputs[width] = torch.zeros(
                self.cache.num_slots, columns, dtype=torch.long, device=self.device
            )
        return self.inputs[width]

    def features_of(self, packed: torch.Tensor, shape: StaticShape) -> torch.Tensor:
        """(R, T, H) from the packed inputs on the device: what a graph of the forward records."""
        return self.model.features(self._batch(packed, shape), self.cache)

    def _batch(self, packed: torch.Tensor, shape: StaticShape) -> ForwardBatch:
        """The forward's inputs, unpacked on the device: the part of the step a graph records. Row r
        is cache slot r, and its one span reads the shape's whole length."""
        R, T, L = shape.num_rows, shape.width, shape.read_length
        rows = forward_rows.unpack(packed, T)
        mask = attention_mask(rows.start, rows.num_new, rows.relation, L)
        everything = slice(0, R)
        return forward_rows.forward_batch(
            rows,
            self.cache,
            torch.arange(R, device=packed.device),
            [AttentionSpan(everything, everything, mask, L)],
            self.cache.num_columns + T,
            T,
        )


def pack(sequences: Sequence, shape: StaticShape) -> np.ndarray:
    """(R, columns) int64 on the host: each sequence in the row of its slot, the other rows padding,
    every row as wide as the shape (`forward_rows.pack`; relation always, as a tree may come)."""
    return forward_rows.pack(sequences, [s.slot for s in sequences], shape.num_rows, shape.width, True)
