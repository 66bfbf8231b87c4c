"""Seer's divided rollout (§4.2): requests run in chunks and each chunk goes to the least-loaded worker.

A request is dispatched with max_tokens set to a chunk (e.g. 8K tokens); when the chunk ends it
returns to the request buffer and is dispatched again, possibly elsewhere (the global KV-cache pool
makes the move cheap). A worker takes a chunk only if its KV budget can hold the chunk in full,
so divided rollout never preempts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChunkPolicy:
    chunk_size: int  # tokens a request may generate before it returns to the buffer

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError("chunk_size must be positive")

    def chunk_end(self, num_generated: int, max_tokens: int) -> int:
        """Output position at which this dispatch stops (Seer Algorithm 1, lines 19-20)."""
        return min(num_generated + self.chunk_size, max_tokens)


def select_instance(
    kv_reserved: np.ndarray,  # (num_workers,) KV tokens already promised to running chunks
    num_running: np.ndarray,  # (num_workers,) requests running on each worker
    kv_capacity: float,
    max_num_seqs: int,
    need_tokens: float,
) -> int | None:
    """Least-loaded worker (by KV reservation) that can hold need_tokens more; None if none can."""
    fits = (kv_reserved + need_tokens <= kv_capacity) & (num_running < max_num_seqs)
    if not fits.any():
        return None
    load = np.where(fits, kv_reserved, np.inf)
    return int(np.argmin(load))
