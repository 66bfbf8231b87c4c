"""A training forward's attention on the CPU (`specroll.model.recomputed_grad`): block attention's
values to the bit, fused attention's gradients; trees are refused rather than read as chains."""

from __future__ import annotations

import pytest
import torch

from specroll.model.batch_invariant import BLOCK, block_attention
from specroll.model.recomputed_grad import chain_attention_with_grad, use_recomputed_attention_gradient
from specroll.model.transformer import Attention, grouped_attention
from specroll.engine_config import EngineConfig
from specroll.train.policy_forward import PolicyForward, load_trainable


def _inputs():
    g = torch.Generator().manual_seed(0)
    shapes = [(2, 4, 3, 8), (2, 2, BLOCK, 8), (2, 2, BLOCK, 8)]
    q, keys, values = (torch.randn(*shape, generator=g).requires_grad_() for shape in shapes)
    mask = torch.ones(2, 1, 3, BLOCK, dtype=torch.bool).tril(diagonal=5)
    mask[1, :, :, 4:] = False
    return [q, keys, values], mask


def test_values_are_block_attentions_bits_and_gradients_torchs():
    inputs, mask = _inputs()
    attend = chain_attention_with_grad(lambda q, k, v, m, columns=None: block_attention(q, k, v, m, 4))
    upstream = torch.randn(2, 4, 3, 8, generator=torch.Generator().manual_seed(1))
    ours = attend(*inputs, mask)
    assert torch.equal(ours.detach(), block_attention(*[t.detach() for t in inputs], mask, 4))
    our_grads = torch.autograd.grad(ours, inputs, upstream)
    torch_grads = torch.autograd.grad(grouped_attention(*inputs, mask), inputs, upstream)
    for got, expected in zip(our_grads, torch_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_a_tree_is_refused_and_only_block_attention_is_rewired(qwen2_dir):
    forward = PolicyForward(load_trainable(qwen2_dir), EngineConfig())
    attentions = [m for m in forward.model.modules() if isinstance(m, Attention)]
    assert attentions and all(m.kernel is not None for m in attentions)
    inputs, mask = _inputs()
    with pytest.raises(ValueError, match="chains"):
        attentions[0].kernel(*inputs, mask, torch.zeros(2, 3, BLOCK, dtype=torch.long))
    fast = load_trainable(qwen2_dir)
    use_recomputed_attention_gradient(fast)  # fast numerics: torch's attention, nothing to rewire
    assert all(m.kernel is None for m in fast.modules() if isinstance(m, Attention))
