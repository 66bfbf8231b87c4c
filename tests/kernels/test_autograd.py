"""The batch-invariant kernels with gradients (`specroll.model.differentiable_kernels`), run by Triton's
interpreter on the CPU: each op's values are the kernel's bits and its gradients torch's; the
trainer's forward on them gives an engine's reported log-probabilities to the bit and differentiates."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from triton_required import require_triton

require_triton()

from specroll.engine.engine import Engine, add_requests  # noqa: E402
from specroll.engine.request import Request, SamplingParams  # noqa: E402
from specroll.engine_config import EngineConfig  # noqa: E402
from specroll.kernels.add_rms_norm import invariant_add_rms_norm  # noqa: E402
from specroll.kernels.attention import invariant_attention  # noqa: E402
from specroll.model.differentiable_kernels import (  # noqa: E402
    differentiable_add_rms_norm,
    differentiable_attention,
    differentiable_linear,
    differentiable_rms_norm,
    differentiable_rotary,
    differentiable_silu_mul,
    silu_mul,
)
from specroll.kernels.linear import invariant_linear  # noqa: E402
from specroll.kernels.rms_norm import invariant_rms_norm  # noqa: E402
from specroll.kernels.rotary import invariant_rotary  # noqa: E402
from specroll.kernels.silu_mul import invariant_silu_mul  # noqa: E402
from specroll.model.rope import apply_rotary  # noqa: E402
from specroll.model.loader import load_model  # noqa: E402
from specroll.model.runner import ModelRunner  # noqa: E402
from specroll.model.transformer import grouped_attention, rms_norm  # noqa: E402
from specroll.train.policy_forward import PolicyForward, load_trainable, sequence_logprobs  # noqa: E402


def _leaves(*shapes, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).requires_grad_() for shape in shapes]


def _values_and_grads(fn, inputs: list[torch.Tensor], upstream: torch.Tensor):
    out = fn(*inputs)
    return out.detach(), torch.autograd.grad(out, inputs, upstream)


def _check(differentiable, kernel, reference, inputs: list[torch.Tensor], constants=()) -> None:
    """The op's values are the kernel's bits; its gradients are torch's (rounding apart)."""
    upstream = torch.randn(kernel(*inputs, *constants).shape, generator=torch.Generator().manual_seed(1))
    ours, our_grads = _values_and_grads(lambda *x: differentiable(*x, *constants), inputs, upstream)
    with torch.no_grad():
        assert torch.equal(ours, kernel(*inputs, *constants))
    _, torch_grads = _values_and_grads(lambda *x: reference(*x, *constants), inputs, upstream)
    for got, expected in zip(our_grads, torch_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_linear_is_the_kernels_values_with_torchs_gradients():
    _check(differentiable_linear, invariant_linear, F.linear, _leaves((2, 3, 16), (8, 16), (8,)))


def test_rms_norm_is_the_kernels_values_with_torchs_gradients():
    x, weight = _leaves((5, 16), (16,))
    _check(differentiable_rms_norm, invariant_rms_norm, rms_norm, [x, weight], constants=(1e-6,))


def test_attention_is_the_kernels_values_with_torchs_gradients():
    q, keys, values = _leaves((2, 4, 3, 16), (2, 2, 8, 16), (2, 2, 8, 16))
    mask = torch.ones(2, 1, 3, 8, dtype=torch.bool).tril(diagonal=4)  # query t sees keys 0..4+t
    mask[1, :, :, 6:] = False  # a shorter sequence
    kernel = lambda q, k, v: invariant_attention(q, k, v, mask)  # noqa: E731
    reference = lambda q, k, v: grouped_attention(q, k, v, mask)  # noqa: E731
    differentiable = lambda q, k, v: differentiable_attention(q, k, v, mask)  # noqa: E731
    _check(differentiable, kernel, reference, [q, keys, values])


def test_silu_mul_is_the_kernels_values_with_torchs_gradients():
    gate, up = _leaves((3, 5, 40), (3, 5, 40))
    _check(differentiable_silu_mul, invariant_silu_mul, silu_mul, [gate, up])


def _check_pair(differentiable, kernel, reference, inputs: list[torch.Tensor]) -> None:
    """`_check` for an op of two outputs: the kernel's bits, torch's gradients of a loss of both."""
    g = torch.Generator().manual_seed(1)
    upstream = [torch.randn(out.shape, generator=g) for out in kernel(*inputs)]
    loss = lambda outs: sum((out * u).sum() for out, u in zip(outs, upstream, strict=True))  # noqa: E731
    ours = differentiable(*inputs)
    leaves = [t for t in inputs if t.requires_grad]
    our_grads = torch.autograd.grad(loss(ours), leaves)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(ours, kernel(*inputs), strict=True))
    torch_grads = torch.autograd.grad(loss(reference(*inputs)), leaves)
    for got, expected in zip(our_grads, torch_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_add_rms_norm_is_the_kernels_values_with_torchs_gradients():
    """Both outputs carry gradient back: the new residual's own and the norm's, to x, y and the weight."""
    x, y, weight = _leaves((2, 3, 16), (2, 3, 16), (16,))
    kernel = lambda x, y, w: invariant_add_rms_norm(x, y, w, 1e-6)  # noqa: E731
    reference = lambda x, y, w: (x + y, rms_norm(x + y, w, 1e-6))  # noqa: E731
    differentiable = lambda x, y, w: differentiable_add_rms_norm(x, y, w, 1e-6)  # noqa: E731
    _check_pair(differentiable, kernel, reference, [x, y, weight])


def test_rotary_is_the_kernels_values_with_torchs_gradients():
    q, k = _leaves((2, 4, 3, 16), (2, 2, 3, 16))
    angles = torch.rand(2, 1, 3, 8, generator=torch.Generator().manual_seed(2)) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    reference = lambda q, k, cos, sin: (apply_rotary(q, cos, sin), apply_rotary(k, cos, sin))  # noqa: E731
    _check_pair(differentiable_rotary, invariant_rotary, reference, [q, k, cos, sin])


def test_without_a_gradient_the_bare_kernel_runs():
    """The trainer's reference forward (no grad) records nothing: the kernel is called as it is."""
    x, weight, bias = _leaves((2, 16), (8, 16), (8,))
    with torch.no_grad():
        out = differentiable_linear(x, weight, bias)
    assert out.grad_fn is None and torch.equal(out, invariant_linear(x.detach(), weight.detach(), bias))


def _engine_rollout(model_dir, dtype: str) -> list[Request]:
    """Plain decoding on the kernels: each emitted token's log-probability as the engine reports it."""
    config = EngineConfig(max_batch_size=4, max_model_len=32, max_draft=0, seed=5, dtype=dtype)
    model = load_model(model_dir, dtype=getattr(torch, dtype))
    runner = ModelRunner(model, config.max_batch_size, config.cache_capacity, True, kernels="triton")
    engine = Engine(runner, config, None, None)
    prompts = [(3, 9, 4, 17, 5), (8, 2, 11)]
    params = SamplingParams(max_tokens=6, temperature=1.0)
    requests = [Request(i, i, 0, prompt, params) for i, prompt in enumerate(prompts)]
    assert not add_requests(engine, requests)
    engine.run()
    return requests


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_trainers_forward_on_the_kernels_gives_the_engines_logprobs_to_the_bit(qwen2_dir, dtype):
    """fp32 master weights rounded to the engine's dtype, prefilled on the differentiable kernels:
    every token's log-probability is the bits the engine's decode steps reported, and the loss
    differentiates down to every parameter."""
    requests = _engine_rollout(qwen2_dir, dtype)
    policy = load_trainable(qwen2_dir)
    forward = PolicyForward(policy, EngineConfig(dtype=dtype), kernels="triton")
    prompts = [r.prompt_token_ids for r in requests]
    logprobs, mask = sequence_logprobs(forward, prompts, [r.output_token_ids for r in requests], 1.0)
    for row, request in zip(logprobs, requests, strict=True):
        assert row[: len(request.output_logprobs)].tolist() == request.output_logprobs
    (logprobs * mask).sum().backward()
    grads = [p.grad for p in policy.parameters()]
    assert all(g is not None and g.dtype == torch.float32 and g.isfinite().all() for g in grads)
    assert all(g.abs().sum() > 0 for g in grads)
