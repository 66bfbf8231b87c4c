"""The GPU's batch-invariant kernels, run by Triton's interpreter on the CPU: a row's bits are the
same whatever else shares the launch (row counts 1..256, widths 1/5/17, read lengths, neighbours).

The interpreter runs the kernels' structure (their tiles, loops and reduction shapes), not a GPU's
instructions: on a GPU the same properties are checked by `make gpu-check` part `exact`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tree_paths import TREE, chain_of_path
from triton_required import require_triton

require_triton()

from specroll.kernels.attention import invariant_attention  # noqa: E402
from specroll.kernels.plans import KEY_SPLIT  # noqa: E402
from specroll.kernels.linear import invariant_linear  # noqa: E402
from specroll.kernels.rms_norm import invariant_rms_norm  # noqa: E402
from specroll.kernels.rows import cumsum_rows, softmax_rows  # noqa: E402
from specroll.model.chain_order import chain_mask, chain_order  # noqa: E402
from specroll.model.masks import tree_layout  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16]
ROW_COUNTS = (1, 2, 3, 5, 7, 16, 17, 40, 63, 64, 65, 128, 200, 256)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(64, 96), (200, 130)])  # K and N inside and across tiles
def test_linear_rows_are_the_same_bits_for_any_row_count(dtype, shape):
    K, N = shape
    g = torch.Generator().manual_seed(K)
    weight, bias = torch.randn(N, K, generator=g).to(dtype), torch.randn(N, generator=g).to(dtype)
    x = torch.randn(256, K, generator=g).to(dtype)
    reference = invariant_linear(x, weight, bias)
    assert (reference.float() - F.linear(x.float(), weight.float(), bias.float())).abs().max() < (
        1e-4 if dtype == torch.float32 else 0.5
    )
    for m in ROW_COUNTS:
        assert torch.equal(invariant_linear(x[:m], weight, bias), reference[:m]), m
        assert torch.equal(invariant_linear(x[m - 1 : m], weight, bias), reference[m - 1 : m]), m
        assert torch.equal(invariant_linear(x[256 - m :], weight, bias), reference[256 - m :]), m


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_sums_every_row_of_a_tile_alike(dtype):
    """One row copied to every place of a launch's tiles has one result: where the interpreter's
    BLAS summed a tile's rows differently by place (OpenBLAS's Haswell sgemm, rows 6-11 of every 12),
    a row's bits would follow how many rows precede it."""
    g = torch.Generator().manual_seed(3)
    weight, row = torch.randn(96, 130, generator=g).to(dtype), torch.randn(1, 130, generator=g).to(dtype)
    out = invariant_linear(row.expand(100, -1), weight, None)
    assert torch.equal(out, out[:1].expand(100, -1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_rows_are_the_same_bits_for_any_row_count(dtype):
    g = torch.Generator().manual_seed(1)
    x, weight = torch.randn(256, 96, generator=g).to(dtype), torch.randn(96, generator=g).to(dtype)
    reference = invariant_rms_norm(x, weight, 1e-6)
    normed = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype)
    expected = (weight * normed).float()
    ulps = 1e-6 if dtype == torch.float32 else 2**-6  # bf16: two roundings apart at most
    assert ((reference.float() - expected).abs() <= ulps * expected.abs() + 1e-6).all()
    for m in ROW_COUNTS:
        assert torch.equal(invariant_rms_norm(x[m - 1 : m], weight, 1e-6), reference[m - 1 : m]), m
        assert torch.equal(invariant_rms_norm(x[:m], weight, 1e-6), reference[:m]), m


def test_vocabulary_reductions_are_the_same_bits_for_any_row_count():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(64, 3000, generator=g) * 4  # three chunks, the last one partial
    probs, logprobs = softmax_rows(logits), softmax_rows(logits, log=True)
    cdf = cumsum_rows(probs.double())
    expected = logits.softmax(-1)  # a sum of 3,000 terms in another order: within 1e-5 relative
    assert ((probs - expected).abs() <= 1e-5 * expected + 1e-12).all()
    assert (logprobs - logits.log_softmax(-1)).abs().max() < 1e-5
    assert (cdf - probs.double().cumsum(-1)).abs().max() < 1e-12
    assert (cdf[:, 1:] >= cdf[:, :-1]).all()  # a CDF: never decreasing across chunks
    for m in (1, 2, 7, 17, 64):
        assert torch.equal(softmax_rows(logits[m - 1 : m]), probs[m - 1 : m]), m
        assert torch.equal(softmax_rows(logits[:m], log=True), logprobs[:m]), m
        assert torch.equal(cumsum_rows(probs[:m].double()), cdf[:m]), m


H, HKV, D = 6, 2, 16


def _causal_mask(starts: torch.Tensor, T: int, L: int) -> torch.Tensor:
    """(b, 1, T, L): query t of row i sees positions <= starts[i] + t."""
    return (torch.arange(L)[None, None] <= (starts[:, None] + torch.arange(T))[..., None])[:, None]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", [1, 5, 17])
def test_attention_query_is_the_same_bits_alone_in_any_width_batch_and_read_length(dtype, width):
    g = torch.Generator().manual_seed(width)
    starts = torch.tensor([3, 40, 100, 64])
    L = 192
    q = torch.randn(4, H, width, D, generator=g).to(dtype)
    keys, values = (torch.randn(4, HKV, L, D, generator=g).to(dtype) for _ in range(2))
    batched = invariant_attention(q, keys, values, _causal_mask(starts, width, L))
    expected = F.scaled_dot_product_attention(
        q.float(), keys.float().repeat_interleave(H // HKV, 1), values.float().repeat_interleave(H // HKV, 1),
        attn_mask=_causal_mask(starts, width, L),
    )  # fmt: skip
    assert (batched.float() - expected).abs().max() < (1e-5 if dtype == torch.float32 else 2e-2)
    for i, start in enumerate(starts.tolist()):
        for t in range(width):
            length = -(-(start + t + 1) // 64) * 64  # a decode reads to its own block boundary
            alone = invariant_attention(
                q[i : i + 1, :, t : t + 1], keys[i : i + 1, :, :length], values[i : i + 1, :, :length],
                _causal_mask(starts[i : i + 1] + t, 1, length),
            )  # fmt: skip
            assert torch.equal(alone[0, :, 0], batched[i, :, t]), (i, t)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_over_several_key_ranges_is_the_same_bits_at_any_read_length(dtype):
    """Contexts across `plans.KEY_SPLIT`'s ranges (one program each, merged in range order): a query
    reading three ranges gives the bits it gets reading only its own, and the merge agrees with fp32
    attention."""
    g = torch.Generator().manual_seed(11)
    starts = torch.tensor([KEY_SPLIT - 2, 2 * KEY_SPLIT + 5, 10])  # across the first and second cuts
    L = 3 * KEY_SPLIT
    q = torch.randn(3, H, 2, D, generator=g).to(dtype)
    keys, values = (torch.randn(3, HKV, L, D, generator=g).to(dtype) for _ in range(2))
    batched = invariant_attention(q, keys, values, _causal_mask(starts, 2, L))
    expected = F.scaled_dot_product_attention(
        q.float(), keys.float().repeat_interleave(H // HKV, 1), values.float().repeat_interleave(H // HKV, 1),
        attn_mask=_causal_mask(starts, 2, L),
    )  # fmt: skip
    assert (batched.float() - expected).abs().max() < (1e-5 if dtype == torch.float32 else 2e-2)
    for i, start in enumerate(starts.tolist()):
        length = -(-(start + 2) // 64) * 64
        alone = invariant_attention(
            q[i : i + 1], keys[i : i + 1, :, :length], values[i : i + 1, :, :length],
            _causal_mask(starts[i : i + 1], 2, length),
        )  # fmt: skip
        assert torch.equal(alone[0], batched[i]), i


@pytest.mark.parametrize("start", [5, 30, 62, 64])  # the tree within a block and across a boundary
def test_a_tree_node_gets_the_bits_of_the_chain_holding_its_path(start):
    g = torch.Generator().manual_seed(start)
    T = len(TREE)
    L = -(-(start + T) // 64) * 64
    depth, relation = tree_layout(TREE, T, 0)
    q = torch.randn(2, H, T, D, generator=g)
    keys, values = torch.randn(2, HKV, L, D, generator=g), torch.randn(2, HKV, L, D, generator=g)
    starts = torch.tensor([start, start // 2])  # a second row with another context
    order = chain_order(starts, depth.expand(2, T), relation.expand(2, T, T), L)
    tree = invariant_attention(q, keys, values, chain_mask(starts, depth.expand(2, T), L), order.columns)
    for t in range(T):
        path = [u for u in range(T) if relation[t, u]]
        chain_keys, chain_values, mask = chain_of_path(keys, values, start, path)
        alone = invariant_attention(q[:1, :, t : t + 1], chain_keys, chain_values, mask)
        assert torch.equal(alone[0, :, 0], tree[0, :, t]), t
