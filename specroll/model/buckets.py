"""The shapes a captured forward comes in: few enough to capture each once, close enough to the real
shape that padding costs little. Imports no torch.

A forward of `n` rows (cache slots 0..n-1), `T` new tokens a row and contexts up to `length` runs at
the smallest bucket that holds it: rows as nano-vllm buckets its decode batches (1, 2, 4, 8, then
every 16); the width at 1, 2, 3, 5, 9, 17, ... (a verification's width is the draft length plus one:
0-2 drafts run as they are, more are padded with drafts that cannot be accepted, nearly free on a
GPU); the read length at `MIN_READ_BLOCKS` x 2^k blocks (attention reads every row to the bucket, so
at most twice the longest context, or the smallest bucket). A rollout whose batch shrinks through its
tail visits every row bucket, so each of the other two dimensions multiplies the graphs recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

SMALL_ROW_BUCKETS = (1, 2, 4, 8)
ROW_STEP = 16  # past the small buckets, rows are rounded up to a multiple of this
MIN_READ_BLOCKS = 4  # the smallest read bucket, in blocks (256 positions of 64)


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


def width_bucket(width: int, max_width: int) -> int:
    """The smallest of 1, 2, 3, 5, 9, 17, ... (2^k + 1) holding `width` new tokens, at most `max_width`."""
    if not 1 <= width <= max_width:
        raise ValueError(f"width {width} outside 1..{max_width}")
    bucket = 1
    while bucket < width:
        bucket = 2 if bucket == 1 else 2 * bucket - 1
    return min(bucket, max_width)


def read_bucket(length: int, block: int, max_length: int) -> int:
    """The smallest `block` x `MIN_READ_BLOCKS` x 2^k holding `length` positions, at most `max_length`
    (itself a bucket)."""
    if not 1 <= length <= max_length:
        raise ValueError(f"read length {length} outside 1..{max_length}")
    bucket = block * MIN_READ_BLOCKS
    while bucket < length:
        bucket *= 2
    return min(bucket, max_length)


def static_shape(
    slots: list[int], lengths: list[int], width: int, limits: StaticShape, block: int
) -> StaticShape:
    """The bucket of a forward over `slots`, `width` new tokens at most a row, whose rows attend to
    `lengths` positions (cached + new), within `limits` (the most rows, width and read length)."""
    return StaticShape(
        row_bucket(max(slots) + 1, limits.num_rows),
        width_bucket(width, limits.width),
        read_bucket(max(lengths), block, limits.read_length),
    )
