"""The batch-invariant kernels with gradients, for a training forward.

Each op's forward is the kernel itself, so a training forward's values are the engine's to the bit;
its backward is torch's own math on the saved inputs (a linear layer's two products; RMSNorm,
attention and SiLU(gate) * up recomputed in torch and differentiated, `specroll.model.recomputed_grad`;
the residual add fused with a norm, through the norm's; rotary, the transposed rotation). Gradients
need not be batch-invariant: only the log-probabilities in the importance ratio must equal the rollout's.

The engine's inference path keeps the bare kernels: a model gets these only through
`use_differentiable_kernels`, which the trainer calls on its own copy of the policy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specroll.kernels.add_rms_norm import invariant_add_rms_norm
from specroll.kernels.attention import invariant_attention
from specroll.kernels.linear import invariant_linear
from specroll.kernels.rms_norm import invariant_rms_norm
from specroll.kernels.rotary import invariant_rotary
from specroll.kernels.silu_mul import invariant_silu_mul
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


class _AddRMSNorm(torch.autograd.Function):
    """`invariant_add_rms_norm` forward -> (s = x + y, RMSNorm(s)); backward: s's gradient, its own
    plus the norm's (recomputed in torch), is both x's and y's."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float):
        total, out = invariant_add_rms_norm(x, y, weight, eps)
        ctx.save_for_backward(total, weight)
        ctx.eps = eps
        return total, out

    @staticmethod
    def backward(ctx, grad_total: torch.Tensor, grad_out: torch.Tensor):
        total, weight = ctx.saved_tensors
        total = total.detach().requires_grad_()
        weight = weight.detach().requires_grad_(ctx.needs_input_grad[2])
        with torch.enable_grad():
            out = rms_norm(total, weight, ctx.eps)
        inputs = [total, weight] if ctx.needs_input_grad[2] else [total]
        grads = torch.autograd.grad(out, inputs, grad_out)
        grad_sum = grads[0] + grad_total
        return grad_sum, grad_sum, grads[1] if ctx.needs_input_grad[2] else None, None


def differentiable_add_rms_norm(
    x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`invariant_add_rms_norm`, differentiable."""
    if not needs_grad(x, y, weight):
        return invariant_add_rms_norm(x, y, weight, eps)
    return _AddRMSNorm.apply(x, y, weight, eps)


class _Rotary(torch.autograd.Function):
    """`invariant_rotary` forward; backward, per tensor: out = x cos + R(x) sin with R(x) = (-x2, x1),
    so dx = g cos + R^T(g sin), R^T(u) = (u2, -u1). cos and sin (a table's) get no gradient."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        ctx.save_for_backward(cos, sin)
        return invariant_rotary(q, k, cos, sin)

    @staticmethod
    def backward(ctx, grad_q: torch.Tensor, grad_k: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return _rotated_back(grad_q, cos, sin), _rotated_back(grad_k, cos, sin), None, None


def _rotated_back(grad: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = grad.shape[-1] // 2
    u = grad * sin
    return grad * cos + torch.cat((u[..., half:], -u[..., :half]), dim=-1)


def differentiable_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`invariant_rotary`, differentiable in q and k."""
    if not needs_grad(q, k):
        return invariant_rotary(q, k, cos, sin)
    return _Rotary.apply(q, k, cos, sin)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up in torch: the gradient's reference."""
    return F.silu(gate) * up


def differentiable_silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """`invariant_silu_mul`, differentiable: the engine's bits forward, torch's SiLU backward."""
    if not needs_grad(gate, up):
        return invariant_silu_mul(gate, up)
    return Recomputed.apply(invariant_silu_mul, silu_mul, (), gate, up)


_DIFFERENTIABLE = {
    invariant_linear: differentiable_linear,
    invariant_rms_norm: differentiable_rms_norm,
    invariant_attention: differentiable_attention,
    invariant_add_rms_norm: differentiable_add_rms_norm,
    invariant_rotary: differentiable_rotary,
    invariant_silu_mul: differentiable_silu_mul,
}
KERNEL_ATTRIBUTES = ("kernel", "add_kernel", "rotary_kernel")  # where the model's modules hold kernels


def use_differentiable_kernels(model: nn.Module) -> None:
    """Give every module of `model` that runs a batch-invariant kernel its differentiable version
    (after `CausalLM.use_batch_invariant_numerics("triton")`); the forward's values do not change."""
    for module in model.modules():
        for attribute in KERNEL_ATTRIBUTES:
            kernel = getattr(module, attribute, None)
            if kernel in _DIFFERENTIABLE:
                setattr(module, attribute, _DIFFERENTIABLE[kernel])
