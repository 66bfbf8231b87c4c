"""The batch-invariant kernels with gradients, for a training forward.

Each op's forward is the kernel itself, so a training forward's values are the engine's to the bit;
its backward is torch's own math on the saved inputs (a linear layer's two products; RMSNorm and
attention recomputed in torch and differentiated). Gradients need not be batch-invariant: only the
log-probabilities that enter the importance ratio must equal the rollout's.

The engine's inference path keeps the bare kernels: a model gets these only through
`use_differentiable_kernels`, which the trainer calls on its own copy of the policy.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from specroll.kernels.attention import invariant_attention
from specroll.kernels.linear import invariant_linear
from specroll.kernels.rms_norm import invariant_rms_norm
from specroll.model.transformer import grouped_attention, rms_norm


class _Linear(torch.autograd.Function):
    """`invariant_linear` forward; backward dx = g W, dW = g^T x, db = sum of g over rows."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return invariant_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1])  # (M, N)
        grad_x = grad @ weight if ctx.needs_input_grad[0] else None
        grad_weight = rows.T @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[1] else None
        grad_bias = rows.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


class _Recomputed(torch.autograd.Function):
    """forward: `kernel(*inputs, *constants)`; backward: the gradient of `reference(*inputs,
    *constants)`, the same op in torch's kernels, recomputed from the saved inputs."""

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


def _needs_grad(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def differentiable_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`invariant_linear`, differentiable."""
    if not _needs_grad(x, weight, bias):
        return invariant_linear(x, weight, bias)
    return _Linear.apply(x, weight, bias)


def differentiable_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`invariant_rms_norm`, differentiable."""
    if not _needs_grad(x, weight):
        return invariant_rms_norm(x, weight, eps)
    return _Recomputed.apply(invariant_rms_norm, rms_norm, (eps,), x, weight)


def differentiable_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    columns: torch.Tensor | None = None,
) -> torch.Tensor:
    """`invariant_attention`, differentiable for chains (a training forward has no trees)."""
    if not _needs_grad(q, keys, values):
        return invariant_attention(q, keys, values, mask, columns)
    if columns is not None:
        raise ValueError("attention over a tree in chain order has no gradient: train on chains")
    return _Recomputed.apply(invariant_attention, grouped_attention, (), q, keys, values, mask)


_DIFFERENTIABLE = {
    invariant_linear: differentiable_linear,
    invariant_rms_norm: differentiable_rms_norm,
    invariant_attention: differentiable_attention,
}


def use_differentiable_kernels(model: nn.Module) -> None:
    """Give every module of `model` that runs a batch-invariant kernel its differentiable version
    (after `CausalLM.use_batch_invariant_numerics("triton")`); the forward's values do not change."""
    for module in model.modules():
        kernel = getattr(module, "kernel", None)
        if kernel in _DIFFERENTIABLE:
            module.kernel = _DIFFERENTIABLE[kernel]
