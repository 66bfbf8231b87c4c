"""The batch-invariant kernels with gradients, for a training forward.

Each op's forward is the kernel itself, so a training forward's values are the engine's to the bit;
its backward is torch's own math on the saved inputs (a linear layer's two products; RMSNorm,
attention and SiLU(gate) * up recomputed in torch and differentiated, `specroll.model.recomputed_grad`;
the residual add fused with a norm, through the norm's; rotary, the transposed rotation). Gradients
need not be batch-invariant: only the log-probabilities in the importance ratio must equal the rollout's.

The wrappers take any kernel with the model's signatures: a GPU's Triton kernels (`specroll.kernels`)
and specroll's CPU kernels (`specroll.cpu_kernels`) alike. The engine's inference path keeps the bare
kernels: a model gets these only through `use_differentiable_kernels`, which the trainer calls on its
own copy of the policy.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from specroll.model.recomputed_grad import Recomputed, chain_attention_with_grad, needs_grad
from specroll.model.transformer import MLP, Attention, Linear, RMSNorm, rms_norm


class _Linear(torch.autograd.Function):
    """`kernel` forward; backward dx = g W, dW = g^T x, db = sum of g over rows."""

    @staticmethod
    def forward(ctx, kernel: Callable, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return kernel(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1])  # (M, N)
        grad_x = grad @ weight if ctx.needs_input_grad[1] else None
        grad_weight = rows.T @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[2] else None
        grad_bias = rows.sum(0) if ctx.has_bias and ctx.needs_input_grad[3] else None
        return None, grad_x, grad_weight, grad_bias


def linear_with_grad(kernel: Callable) -> Callable:
    """A linear kernel (x, weight, bias) -> y, differentiable."""

    def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if not needs_grad(x, weight, bias):
            return kernel(x, weight, bias)
        return _Linear.apply(kernel, x, weight, bias)

    return linear


def rms_norm_with_grad(kernel: Callable) -> Callable:
    """An RMSNorm kernel (x, weight, eps) -> y, differentiable through torch's `rms_norm`."""

    def norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if not needs_grad(x, weight):
            return kernel(x, weight, eps)
        return Recomputed.apply(kernel, rms_norm, (eps,), x, weight)

    return norm


class _AddRMSNorm(torch.autograd.Function):
    """`kernel` forward -> (s = x + y, RMSNorm(s)); backward: s's gradient, its own plus the norm's
    (recomputed in torch), is both x's and y's."""

    @staticmethod
    def forward(ctx, kernel: Callable, x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float):
        total, out = kernel(x, y, weight, eps)
        ctx.save_for_backward(total, weight)
        ctx.eps = eps
        return total, out

    @staticmethod
    def backward(ctx, grad_total: torch.Tensor, grad_out: torch.Tensor):
        total, weight = ctx.saved_tensors
        total = total.detach().requires_grad_()
        weight = weight.detach().requires_grad_(ctx.needs_input_grad[3])
        with torch.enable_grad():
            out = rms_norm(total, weight, ctx.eps)
        inputs = [total, weight] if ctx.needs_input_grad[3] else [total]
        grads = torch.autograd.grad(out, inputs, grad_out)
        grad_sum = grads[0] + grad_total
        return None, grad_sum, grad_sum, grads[1] if ctx.needs_input_grad[3] else None, None


def add_rms_norm_with_grad(kernel: Callable) -> Callable:
    """A residual add and RMSNorm kernel (x, y, weight, eps) -> (x + y, norm), differentiable."""

    def add_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float):
        if not needs_grad(x, y, weight):
            return kernel(x, y, weight, eps)
        return _AddRMSNorm.apply(kernel, x, y, weight, eps)

    return add_norm


class _Rotary(torch.autograd.Function):
    """`kernel` forward; backward, per tensor: out = x cos + R(x) sin with R(x) = (-x2, x1),
    so dx = g cos + R^T(g sin), R^T(u) = (u2, -u1). cos and sin (a table's) get no gradient."""

    @staticmethod
    def forward(ctx, kernel: Callable, q: torch.Tensor, k: torch.Tensor, cos, sin):
        ctx.save_for_backward(cos, sin)
        return kernel(q, k, cos, sin)

    @staticmethod
    def backward(ctx, grad_q: torch.Tensor, grad_k: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return None, _rotated_back(grad_q, cos, sin), _rotated_back(grad_k, cos, sin), None, None


def _rotated_back(grad: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = grad.shape[-1] // 2
    u = grad * sin
    return grad * cos + torch.cat((u[..., half:], -u[..., :half]), dim=-1)


def rotary_with_grad(kernel: Callable) -> Callable:
    """A rotary kernel (q, k, cos, sin) -> (q', k'), differentiable in q and k."""

    def rotate(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        if not needs_grad(q, k):
            return kernel(q, k, cos, sin)
        return _Rotary.apply(kernel, q, k, cos, sin)

    return rotate


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up in torch: the gradient's reference."""
    return F.silu(gate) * up


def silu_mul_with_grad(kernel: Callable) -> Callable:
    """A SiLU(gate) * up kernel, differentiable: the engine's bits forward, torch's SiLU backward."""

    def gated(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        if not needs_grad(gate, up):
            return kernel(gate, up)
        return Recomputed.apply(kernel, silu_mul, (), gate, up)

    return gated


_WRAPPERS = {
    (Linear, "kernel"): linear_with_grad,
    (RMSNorm, "kernel"): rms_norm_with_grad,
    (RMSNorm, "add_kernel"): add_rms_norm_with_grad,
    (Attention, "kernel"): chain_attention_with_grad,
    (Attention, "rotary_kernel"): rotary_with_grad,
    (MLP, "kernel"): silu_mul_with_grad,
}


def use_differentiable_kernels(model: nn.Module) -> None:
    """Give every module of `model` that runs a batch-invariant kernel its differentiable version
    (after `CausalLM.use_batch_invariant_numerics("triton")` or `("cpu")`); the forward's values do
    not change. Wrapping twice wraps once."""
    for module in model.modules():
        for (kind, attribute), wrap in _WRAPPERS.items():
            kernel = getattr(module, attribute, None) if type(module) is kind else None
            if kernel is not None and not getattr(kernel, "has_grad", False):
                wrapped = wrap(kernel)
                wrapped.has_grad = True
                setattr(module, attribute, wrapped)


def _triton_versions() -> dict[str, Callable]:
    """The GPU's kernels with gradients, by the names the tests import."""
    from specroll.kernels.add_rms_norm import invariant_add_rms_norm
    from specroll.kernels.attention import invariant_attention
    from specroll.kernels.linear import invariant_linear
    from specroll.kernels.rms_norm import invariant_rms_norm
    from specroll.kernels.rotary import invariant_rotary
    from specroll.kernels.silu_mul import invariant_silu_mul

    return {
        "differentiable_linear": linear_with_grad(invariant_linear),
        "differentiable_rms_norm": rms_norm_with_grad(invariant_rms_norm),
        "differentiable_attention": chain_attention_with_grad(invariant_attention),
        "differentiable_add_rms_norm": add_rms_norm_with_grad(invariant_add_rms_norm),
        "differentiable_rotary": rotary_with_grad(invariant_rotary),
        "differentiable_silu_mul": silu_mul_with_grad(invariant_silu_mul),
    }


def __getattr__(name: str) -> Callable:
    """`differentiable_linear` and its kin: the Triton kernels' versions, built on first import (Triton
    loads only where asked for)."""
    if name.startswith("differentiable_"):
        versions = _triton_versions()
        if name in versions:
            globals().update(versions)
            return versions[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
