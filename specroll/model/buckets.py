"""The shapes a captured forward comes in: few enough to capture each once, close enough to the real
shape that padding costs little. Imports no torch.

A forward of `n` rows (cache slots 0..n-1), `T` new tokens a row and contexts up to `length` runs at
the smallest bucket that holds it: rows as nano-vllm buckets its decode batches (1, 2, 4, 8, then
every 16), the width as it is (a verification's width is the draft length plus one, a handful of
values), and the read length at a power-of-two multiple of `block` positions (attention reads every
row to the bucket, so at most twice the longest context).
"""

from __future__ import annotations

from dataclasses import dataclass

SMALL_ROW_BUCKETS = (1, 2, 4, 8)
ROW_STEP = 16  # past the small buckets, rows are rounded up to a multiple of this


@dataclass(frozen=True)
class StaticShape:
    num_rows: int  # cache slots 0..num_rows-1, one row each
    width: int  # new tokens per row (T)
    read_length: int  # cache positions every row's attention reads (L)


def row_bucket(num_rows: int, max_rows: int) -> int:
    """The smallest row bucket holding `num_rows` rows, at most `max_rows` (itself a bucket)."""
    if not 1 <= num_rows <= max_rows:
        raise ValueError(f"rows {num_rows} outside 1..{max_rows}")
    small = next((b for b in SMALL_ROW_BUCKETS if b >= num_rows), None)
    bucket = small if small is not None else -(-num_rows // ROW_STEP) * ROW_STEP
    return min(bucket, max_rows)


def read_bucket(length: int, block: int, max_length: int) -> int:
    """The smallest `block` x 2^k holding `length` positions, at most `max_length` (itself a bucket)."""
    if not 1 <= length <= max_length:
        raise ValueError(f"read length {length} outside 1..{max_length}")
    bucket = block
    while bucket < length:
        bucket *= 2
    return min(bucket, max_length)


def static_shape(
    slots: list[int], lengths: list[int], width: int, max_rows: int, block: int, max_length: int
) -> StaticShape:
    """The bucket of a forward over `slots` whose rows attend to `lengths` positions (cached + new)."""
    return StaticShape(
        row_bucket(max(slots) + 1, max_rows), width, read_bucket(max(lengths), block, max_length)
    )
