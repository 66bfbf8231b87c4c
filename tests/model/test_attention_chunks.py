"""Attention chunks: literal plans, coverage, and the greedy plan against an exhaustive search."""

from __future__ import annotations

import itertools
import random

import pytest

from specroll.model.attention_chunks import Chunk, plan_chunks


def optimum(lengths: list[int], max_chunks: int) -> int:
    """Fewest positions read by any split into at most max_chunks contiguous chunks (exhaustive)."""
    n, best = len(lengths), len(lengths) * max(lengths)
    for k in range(1, max_chunks):
        for cuts in itertools.combinations(range(1, n), k):
            bounds = [0, *cuts, n]
            best = min(best, sum((b - a) * max(lengths[a:b]) for a, b in zip(bounds, bounds[1:])))
    return best


def test_literal_plan():
    lengths = [300, 290, 310, 40, 50, 45, 10]
    assert plan_chunks(lengths, max_chunks=3, min_saving=0) == [
        Chunk(0, 3, 310),
        Chunk(3, 6, 50),
        Chunk(6, 7, 10),
    ]


def test_one_chunk_when_no_cut_saves_enough():
    assert plan_chunks([100, 90, 95], min_saving=512) == [Chunk(0, 3, 100)]
    assert plan_chunks([7]) == [Chunk(0, 1, 7)]
    assert plan_chunks([5, 5, 5, 5], min_saving=0) == [Chunk(0, 4, 5)]  # nothing to save


@pytest.mark.parametrize("seed", range(30))
def test_chunks_cover_rows_and_never_read_more_than_one_chunk(seed):
    rng = random.Random(seed)
    lengths = [rng.choice([rng.randint(1, 40), rng.randint(100, 400)]) for _ in range(rng.randint(1, 9))]
    chunks = plan_chunks(lengths, max_chunks=3, min_saving=0)
    assert [c.first for c in chunks] == [0, *[c.end for c in chunks[:-1]]] and chunks[-1].end == len(lengths)
    assert all(c.read_length == max(lengths[c.first : c.end]) for c in chunks)
    assert optimum(lengths, 3) <= sum(c.positions_read for c in chunks) <= len(lengths) * max(lengths)


@pytest.mark.parametrize("seed", range(30))
def test_near_the_optimum_on_admission_ordered_rows(seed):
    # engine slots hold older (longer) requests first: lengths fall in steps, with noise
    rng = random.Random(seed)
    lengths = sorted((rng.randint(10, 400) for _ in range(rng.randint(2, 10))), reverse=True)
    lengths = [max(1, n + rng.randint(-15, 15)) for n in lengths]
    greedy = sum(c.positions_read for c in plan_chunks(lengths, max_chunks=3, min_saving=0))
    assert greedy <= 1.1 * optimum(lengths, 3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one row"):
        plan_chunks([])
    with pytest.raises(ValueError, match="max_chunks"):
        plan_chunks([1, 2], max_chunks=0)
