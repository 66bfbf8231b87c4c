"""The CPU attention kernel: a query's bits depend on the keys it sees, in the order it sees them, alone.

Each identity is checked against a change that a kernel ordering its work by shape would show: more
masked keys (a longer read), more queries in the call (verification width), other rows beside it, a
tree node reading its path in chain order, and two threads. Values agree with fp32 attention to
bf16's rounding.
"""

from __future__ import annotations

import pytest
import torch

from specroll.cpu_kernels import ops
from specroll.model.transformer import grouped_attention

B, H, HKV, D = 3, 9, 3, 64  # SmolLM2's heads


def _inputs(T: int, L: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g).bfloat16()
    keys = torch.randn(B, HKV, L, D, generator=g).bfloat16()
    values = torch.randn(B, HKV, L, D, generator=g).bfloat16()
    return q, keys, values


def _chain_mask(starts: list[int], T: int, L: int) -> torch.Tensor:
    """Query t of row b sees keys 0 .. starts[b] + t."""
    seen = torch.tensor(starts)[:, None, None] + torch.arange(T)[None, :, None]
    return (torch.arange(L)[None, None] <= seen)[:, None]


def test_values_are_fp32_attention_to_bf16s_rounding():
    q, keys, values = _inputs(4, 96)
    mask = _chain_mask([40, 90, 0], 4, 96)
    out = ops.attention(q, keys, values, mask).float()
    wide = grouped_attention(q.float(), keys.float(), values.float(), mask)
    assert torch.allclose(out, wide, atol=1e-2, rtol=1e-2)


def test_a_longer_read_of_masked_keys_changes_no_bit():
    q, keys, values = _inputs(2, 192)
    short = ops.attention(q, keys[:, :, :64], values[:, :, :64], _chain_mask([20, 50, 61], 2, 64))
    long = ops.attention(q, keys, values, _chain_mask([20, 50, 61], 2, 192))
    assert torch.equal(short, long)


def test_a_query_is_the_same_alone_as_among_many_queries_and_rows():
    q, keys, values = _inputs(5, 128, seed=1)
    mask = _chain_mask([30, 70, 100], 5, 128)
    together = ops.attention(q, keys, values, mask)
    for b in range(B):
        for t in range(5):
            alone = ops.attention(
                q[b : b + 1, :, t : t + 1], keys[b : b + 1], values[b : b + 1], mask[b : b + 1, :, t : t + 1]
            )
            assert torch.equal(alone[0, :, 0], together[b, :, t])


def test_a_tree_node_reading_its_path_in_chain_order_equals_the_chain():
    """Keys stored out of order (a tree's nodes at their own columns), read through `columns` in the
    order plain decoding stored them, give plain decoding's bits."""
    q, keys, values = _inputs(1, 64, seed=2)
    chain = _chain_mask([47, 47, 47], 1, 64)
    plain = ops.attention(q, keys, values, chain)
    permutation = torch.randperm(64, generator=torch.Generator().manual_seed(5))
    stored_k, stored_v = torch.empty_like(keys), torch.empty_like(values)
    stored_k[:, :, permutation], stored_v[:, :, permutation] = (
        keys,
        values,
    )  # chain column j at permutation[j]
    columns = permutation.expand(B, 1, 64).contiguous()
    tree = ops.attention(q, stored_k, stored_v, chain, columns)
    assert torch.equal(tree, plain)
    assert not torch.equal(ops.attention(q, stored_k, stored_v, chain), plain)  # unordered reads differ


def test_two_threads_give_one_threads_bits(threads):
    q, keys, values = _inputs(3, 256, seed=4)
    mask = _chain_mask([100, 200, 250], 3, 256)
    threads(1)
    one = ops.attention(q, keys, values, mask)
    threads(2)
    assert torch.equal(ops.attention(q, keys, values, mask), one)


def test_bad_operands_are_refused_by_name():
    q, keys, values = _inputs(1, 64)
    mask = _chain_mask([3, 3, 3], 1, 64)
    with pytest.raises(RuntimeError, match="bf16"):
        ops.attention(q.float(), keys, values, mask)
    with pytest.raises(RuntimeError, match="mask"):
        ops.attention(q, keys, values, mask[..., :32])
