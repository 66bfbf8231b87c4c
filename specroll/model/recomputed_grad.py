"""Ops whose values come from one implementation and whose gradient from another.

A training forward must give the engine's values to the bit (its batch-invariant kernels), while
its gradient need not be batch-invariant: `Recomputed` runs the kernel forward, saves only the
inputs, and in the backward recomputes the op in a reference implementation (torch's fused ops) and
differentiates that. On the CPU this also spares the backward of block attention's padded score
blocks: the reference is one fused scaled-dot-product attention.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from specroll.model.batch_invariant import block_attention
from specroll.model.transformer import Attention, grouped_attention


class Recomputed(torch.autograd.Function):
    """forward: `kernel(*inputs, *constants)`; backward: the gradient of `reference(*inputs,
    *constants)`, recomputed from the saved inputs."""

    @staticmethod
    def forward(ctx, kernel: Callable, reference: Callable, constants: tuple, *inputs: torch.Tensor):
        ctx.reference, ctx.constants = reference, constants
        ctx.save_for_backward(*inputs)
        return kernel(*inputs, *constants)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        needs = ctx.needs_input_grad[3:]
        inputs = [t.detach().requires_grad_(need) for t, need in zip(ctx.saved_tensors, needs)]
        with torch.enable_grad():
            out = ctx.reference(*inputs, *ctx.constants)
        grads = iter(torch.autograd.grad(out, [t for t, need in zip(inputs, needs) if need], grad))
        return None, None, None, *[next(grads) if need else None for need in needs]


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def chain_attention_with_grad(kernel: Callable) -> Callable:
    """An attention kernel (q, keys, values, mask, columns) -> out that differentiates through
    `grouped_attention`; a tree's chain order (`columns`) has no gradient: training runs chains."""

    def attend(q, keys, values, mask, columns=None):
        if not needs_grad(q, keys, values):
            return kernel(q, keys, values, mask, columns)
        if columns is not None:
            raise ValueError("attention over a tree in chain order has no gradient: train on chains")
        return Recomputed.apply(kernel, grouped_attention, (), q, keys, values, mask)

    return attend


def use_recomputed_attention_gradient(model: nn.Module) -> None:
    """Every block attention of `model` (batch-invariant numerics on the CPU) differentiates through
    torch's fused attention instead of its own blocks; its values do not change."""
    for module in model.modules():
        if isinstance(module, Attention) and module.invariant_rows and module.kernel is None:
            module.kernel = chain_attention_with_grad(_chain_block_attention(module.invariant_rows))


def _chain_block_attention(min_rows: int) -> Callable:
    """`block_attention` behind the kernels' signature, for chains (a tree passes its `ChainOrder`,
    which a training forward never builds)."""

    def attend(q, keys, values, mask, columns=None):
        if columns is not None:
            raise ValueError("a training forward's attention runs chains, not trees")
        return block_attention(q, keys, values, mask, min_rows)

    return attend
