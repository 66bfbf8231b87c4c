"""Batch-invariant numerics: a row's results are the same bits whatever else its forward holds.

Each check computes the row in forwards of other shapes (batch, width, read length, neighbours) and
compares bits. Whether the fast numerics differ is a property of a machine's kernels (they do on the
CPUs measured, BENCHMARKS.md), not a feature, so it is not asserted here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specroll.model.batch_invariant import (
    BLOCK,
    BatchInvarianceUnavailable,
    ROW_SIZES,
    block_attention,
    invariant_query_rows,
    invariant_row_sizes,
    padded_linear,
)
from specroll.model.runner import ModelRunner, SequenceInput
from tree_paths import TREE, chain_of_path

H, HKV, D = 6, 2, 32


@pytest.mark.parametrize("shape", [(64, 96), (576, 1536), (1536, 576), (576, 49152)])
def test_linear_rows_are_the_same_bits_for_any_row_count(shape, one_thread):
    sizes = invariant_row_sizes(*shape, torch.get_num_threads())
    weight, x = torch.randn(shape[1], shape[0]), torch.randn(600, shape[0])
    reference = padded_linear(x, weight, None, sizes)  # three calls: 256 + 256 + 88 padded to 96
    for m in (1, 2, 3, 7, 16, 17, 40, 64, 65, 200, 257, 600):
        assert torch.equal(padded_linear(x[:m], weight, None, sizes), reference[:m]), m
        assert torch.equal(padded_linear(x[m - 1 : m], weight, None, sizes), reference[m - 1 : m]), m


def test_the_probe_names_the_call_sizes_that_agree():
    sizes = invariant_row_sizes(64, 96, torch.get_num_threads())
    assert set(sizes) <= set(ROW_SIZES) and sizes == tuple(sorted(sizes)) and sizes[-1] == ROW_SIZES[-1]
    weight, x = torch.randn(96, 64), torch.randn(ROW_SIZES[-1], 64)  # other values than the probe's
    reference = F.linear(x, weight)
    for m in sizes:  # a size is served only where its rows are the largest call's bits
        assert torch.equal(F.linear(x[:m], weight), reference[:m]), m
    with pytest.raises(ValueError, match="current thread count"):
        invariant_row_sizes(64, 96, torch.get_num_threads() + 1)


class AlignmentDependentBlas:
    """F.linear as a BLAS whose bits change with the input's alignment: one ulp more off it."""

    @staticmethod
    def linear(x, weight, bias=None):
        out = F.linear(x, weight, bias)
        return torch.nextafter(out, torch.full_like(out, float("inf"))) if x.data_ptr() % 64 else out


def test_the_probe_serves_no_size_whose_bits_change_with_alignment(monkeypatch):
    """A BLAS that rounds otherwise at another alignment (or from call to call) serves no call size:
    the probe repeats every size at a shifted buffer, so exact mode refuses these threads at start-up."""
    from specroll.model import batch_invariant

    monkeypatch.setattr(batch_invariant, "F", AlignmentDependentBlas)
    batch_invariant.invariant_row_sizes.cache_clear()
    try:
        with pytest.raises(BatchInvarianceUnavailable, match="alignment"):
            invariant_row_sizes(32, 48, torch.get_num_threads())
    finally:
        batch_invariant.invariant_row_sizes.cache_clear()


def _attend(q, keys, values, mask, invariant: bool):
    if invariant:
        return block_attention(q, keys, values, mask, invariant_query_rows(D, torch.get_num_threads()))
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


def _row_output(invariant: bool, batch: int, width: int, read_length: int, context: int, row):
    """Row 0 attends `context` cached keys with its first query; the rest of the batch is noise."""
    q0, k0, v0 = row
    q = torch.randn(batch, H, width, D)
    keys, values = torch.randn(batch, HKV, read_length, D), torch.randn(batch, HKV, read_length, D)
    q[0, :, :1], keys[0, :, :context], values[0, :, :context] = q0, k0, v0
    mask = torch.zeros(batch, 1, width, read_length, dtype=torch.bool)
    mask[..., :context] = True
    return _attend(q, keys, values, mask, invariant)[0, :, :1]


@pytest.mark.parametrize("context", [5, 64, 300])
def test_block_attention_is_invariant_to_batch_width_and_read_length(context):
    torch.manual_seed(context)
    row = torch.randn(H, 1, D), torch.randn(HKV, context, D), torch.randn(HKV, context, D)
    shortest = -(-context // BLOCK) * BLOCK
    shapes = [
        (b, t, length) for b in (1, 3, 9) for t in (1, 2, 5, 9) for length in (shortest, shortest + 2 * BLOCK)
    ]
    reference = _row_output(True, 1, 1, shortest, context, row)
    same = [torch.equal(_row_output(True, b, t, n, context, row), reference) for b, t, n in shapes]
    assert all(same), [s for s, ok in zip(shapes, same) if not ok]


def test_block_attention_matches_fused_attention_with_tree_masks():
    torch.manual_seed(1)
    q, keys, values = (
        torch.randn(3, H, 4, D),
        torch.randn(3, HKV, 2 * BLOCK, D),
        torch.randn(3, HKV, 2 * BLOCK, D),
    )
    mask = torch.rand(3, 1, 4, 2 * BLOCK) < 0.5
    mask[..., 0] = True
    expected = _attend(q, keys, values, mask, invariant=False)
    assert (_attend(q, keys, values, mask, invariant=True) - expected).abs().max() < 1e-5


def _logits_alone_and_batched(model_dir, batch_invariant: bool) -> tuple[list, list]:
    """Row A's logits at 4 positions: prefilled alone then decoded token by token, versus prefilled
    beside prompts of other lengths and verified in one width-4 forward beside other rows."""
    runner = ModelRunner.from_pretrained(model_dir, 4, 200, batch_invariant=batch_invariant)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, runner.config.vocab_size, (n,), generator=g).tolist() for n in (37, 90, 13)]
    a, follow = prompts[0], [5, 17, 29]
    alone = [runner.forward([SequenceInput(0, 0, a)]).logits[0, 0]]
    alone += [runner.forward([SequenceInput(0, len(a) + i, [t])]).logits[0, 0] for i, t in enumerate(follow)]
    batched = [
        runner.forward(
            [SequenceInput(1, 0, prompts[1]), SequenceInput(0, 0, a), SequenceInput(2, 0, prompts[2])]
        ).logits[1, 0]
    ]
    out = runner.forward(
        [
            SequenceInput(2, len(prompts[2]), [7, 8]),
            SequenceInput(0, len(a), [*follow, 1], num_logits=4),
            SequenceInput(1, len(prompts[1]), [9]),
        ]
    )
    return alone, batched + [out.logits[1, i] for i in range(3)]


@pytest.mark.parametrize("model", ["bundled", "large-vocab"])
def test_runner_logits_are_the_same_bits_in_any_forward(model, large_vocab_dir):
    from specroll.rollout import DEFAULT_MODEL

    model_dir = DEFAULT_MODEL if model == "bundled" else large_vocab_dir
    alone, batched = _logits_alone_and_batched(model_dir, batch_invariant=True)
    assert all(torch.equal(x, y) for x, y in zip(alone, batched))


@pytest.mark.parametrize("start", [5, 62, 64, 127])  # the tree within a block and across a boundary
def test_a_tree_node_gets_the_bits_of_the_chain_holding_its_path(start):
    from specroll.model.chain_order import chain_mask, chain_order
    from specroll.model.masks import tree_layout

    torch.manual_seed(start)
    T, rows = len(TREE), invariant_query_rows(D, torch.get_num_threads())
    L = -(-(start + T) // BLOCK) * BLOCK
    depth, relation = tree_layout(TREE, T, 0)
    q, keys, values = torch.randn(2, H, T, D), torch.randn(2, HKV, L, D), torch.randn(2, HKV, L, D)
    starts = torch.tensor([start, start // 2])  # a second row with another context
    order = chain_order(starts, depth.expand(2, T), relation.expand(2, T, T), L)
    tree = block_attention(q, keys, values, chain_mask(starts, depth.expand(2, T), L), rows, order)
    for t in range(T):
        path = [u for u in range(T) if relation[t, u]]
        chain_keys, chain_values, mask = chain_of_path(keys, values, start, path, BLOCK)
        alone = block_attention(q[:1, :, t : t + 1], chain_keys, chain_values, mask, rows)
        assert torch.equal(alone[0, :, 0], tree[0, :, t]), t


def test_runner_tree_logits_are_plain_decodings_bits(large_vocab_dir):
    """Each node of a tree verified beside another row has the logits of decoding its path alone."""
    runner = ModelRunner.from_pretrained(large_vocab_dir, 2, 200, batch_invariant=True)
    g = torch.Generator().manual_seed(3)
    prompt, other = (torch.randint(3, runner.config.vocab_size, (n,), generator=g).tolist() for n in (61, 20))
    tokens = torch.randint(3, runner.config.vocab_size, (len(TREE),), generator=g).tolist()
    runner.forward([SequenceInput(0, 0, prompt), SequenceInput(1, 0, other)])
    tree = runner.forward(
        [SequenceInput(1, len(other), [4, 5]), SequenceInput(0, len(prompt), tokens, TREE, len(TREE))]
    ).logits[1]
    for t in range(len(TREE)):
        path = [t]
        while TREE[path[0]] >= 0:
            path.insert(0, TREE[path[0]])
        runner.forward([SequenceInput(0, 0, prompt)])
        for depth, u in enumerate(path):
            alone = runner.forward([SequenceInput(0, len(prompt) + depth, [tokens[u]])]).logits[0, 0]
        assert torch.equal(alone, tree[t]), t
