"""The trainer's forward: each rollout token's log-probability under the trainer's copy of the
policy, computed as the engine computed it.

The policy is specroll's own model (`CausalLM`, Hugging Face's parameter names, so its state dict
is what `ModelRunner.load_weights` and `--model` take) with float32 master weights. A training
forward is the engine's prefill of prompt + completion[:-1], with logits at the completion's
positions: the engine's numerics (batch-invariant where the engine's are, with the same kernels:
the CPU's probed BLAS, plain torch ops; specroll's CPU kernels for bf16 and a GPU's Triton kernels,
given gradients by `specroll.model.differentiable_kernels`), the weights rounded to the engine's dtype,
and the engine's log-probability (`sampling.token_logprobs` on `tempered` logits, one temperature a row).

Batch-invariant numerics give a row the same bits in a prefill as in the decode or verification
that emitted its token, so before an update every token's importance ratio pi_theta / pi_rollout is
exactly 1. With fast numerics it is 1 to the rounding between forwards of different shapes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from specroll.engine_config import EngineConfig
from specroll.model.device import torch_dtype
from specroll.model.loader import load_model
from specroll.model.recomputed_grad import use_recomputed_attention_gradient
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.model.transformer import CausalLM
from specroll.placement import invariant_kernels
from specroll.sampling import tempered, token_logprobs


def load_trainable(model_dir: str | Path, device: str = "cpu") -> CausalLM:
    """The policy as specroll's model with float32 weights on `device`, in training mode."""
    return load_model(model_dir, torch.float32, device).train()


class PolicyForward:
    """Training forwards of `model` with the numerics of an engine configured by `engine`;
    `kernels` names the batch-invariant kernels as `ModelRunner` takes them (default: the device's)."""

    def __init__(self, model: CausalLM, engine: EngineConfig, kernels: str | None = None) -> None:
        if kernels is None and engine.batch_invariant:  # the engine's kernels, chosen by its dtype
            kernels = invariant_kernels(next(model.parameters()).device.type, engine.dtype)
        self.runner = ModelRunner(model, 1, 1, batch_invariant=engine.batch_invariant, kernels=kernels)
        if self.runner.kernels in ("triton", "cpu"):
            from specroll.model.differentiable_kernels import use_differentiable_kernels

            use_differentiable_kernels(model)
        elif self.runner.kernels == "probed":
            use_recomputed_attention_gradient(model)
        self.dtype = torch_dtype(engine.dtype)

    @property
    def model(self) -> CausalLM:
        return self.runner.model

    def logits(self, sequences: Sequence[SequenceInput]) -> torch.Tensor:
        """(B, Tl, V) float32 logits of a forward over `sequences` from an empty cache; row b holds
        its num_logits rows first, then padding (`ForwardOutput.logits`). Differentiable."""
        longest = max(s.start + len(s.token_ids) for s in sequences)
        self.runner.use_new_cache(len(sequences), longest, self.dtype)  # autograd records its writes
        batch = self.runner.prepare(sequences)
        if self.dtype == torch.float32:
            logits, _ = self.model(batch, self.runner.cache)
        else:  # the engine's weights are the master weights rounded to its dtype; gradients flow back
            weights = {name: p.to(self.dtype) for name, p in self.model.named_parameters()}
            logits, _ = torch.func.functional_call(self.model, weights, (batch, self.runner.cache))
        return logits.float()


def sequence_logprobs(
    forward: PolicyForward,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each (non-empty) completion's tokens after its prompt, (B, T), with a
    (B, T) mask; T is the longest completion, positions count from 0, padding holds 0."""
    sequences = [
        SequenceInput(slot, 0, [*prompt, *completion[:-1]], num_logits=len(completion))
        for slot, (prompt, completion) in enumerate(zip(prompts, completions))
    ]
    logits = forward.logits(sequences)  # (B, T, V): completion position t at row t
    B, T, _ = logits.shape
    device = logits.device
    lengths = torch.tensor([len(c) for c in completions], device=device)
    mask = torch.arange(T, device=device)[None] < lengths[:, None]  # (B, T)
    tokens = padded(completions, T, torch.long, device)
    # a tensor of temperatures, as the engine's rows divide by: a scalar divisor may be a reciprocal's product
    temperatures = torch.full((B, T), temperature, dtype=torch.float32, device=device)
    return _TokenLogprobs.apply(tempered(logits, temperatures), tokens) * mask, mask.float()


def padded(
    rows: Sequence[Sequence],
    width: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """(len(rows), width): each row's values, then zeros."""
    return torch.tensor([[*row, *[0] * (width - len(row))] for row in rows], dtype=dtype, device=device)


class _TokenLogprobs(torch.autograd.Function):
    """`token_logprobs` (the engine's bits: on a GPU its row kernel, which has no backward) with the
    gradient of log-softmax: d log p_y / d z = onehot(y) - softmax(z)."""

    @staticmethod
    def forward(ctx, scaled: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(scaled, tokens)
        return token_logprobs(scaled, tokens)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        scaled, tokens = ctx.saved_tensors
        grad_scaled = torch.softmax(scaled, -1) * -grad[..., None]
        return grad_scaled.scatter_add_(-1, tokens[..., None], grad[..., None]), None
