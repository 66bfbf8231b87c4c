"""The batch-invariant kernels with gradients, for a training forward.

Each op's forward is the kernel itself, so a training forward's values are the engine's to the bit;
its backward is torch's own math on the saved inputs (a linear layer's two products; RMSNorm and
attention recomputed in torch and differentiated, `specroll.model.recomputed_grad`). Gradients need
not be batch-invariant: only the log-probabilities in the importance ratio must equal the rollout's.

The engine's inference path keeps the bare kernels: a model gets these only through
`use_differentiable_kernels`, which the trainer calls on its own copy of the policy.
"""

from __future__ import annotations

import torch
from torch import nn

from specroll.kernels.attention import invariant_attention
from specroll.kernels.linear import invariant_linear
from specroll.kernels.rms_norm import invariant_rms_norm
from specroll.model.recomputed_grad import Recomputed, chain_attention_with_grad, needs_grad
from specroll.model.transformer import rms_norm


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


def differentiable_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`invariant_linear`, differentiable."""
    if not needs_grad(x, weight, bias):
        return invariant_linear(x, weight, bias)
    return _Linear.apply(x, weight, bias)


def differentiable_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`invariant_rms_norm`, differentiable."""
    if not needs_grad(x, weight):
        return invariant_rms_norm(x, weight, eps)
    return Recomputed.apply(invariant_rms_norm, rms_norm, (eps,), x, weight)


# `invariant_attention`, differentiable
differentiable_attention = chain_attention_with_grad(invariant_attention)


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
