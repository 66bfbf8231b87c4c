"""Sampling as pure functions: logits and explicit uniforms in, distributions and tokens out.

Each row of a batch may carry its own temperature, top-k and top-p. A row's *sampling distribution*
is softmax(logits / temperature) restricted to the top-k tokens and then to the smallest set whose
mass reaches top-p (the nucleus of Holtzman et al. 2020), renormalised; temperature 0 is greedy, a
one-hot on the argmax. Tokens are drawn by inverting the distribution's CDF at a given uniform, so
that the same uniform and the same distribution always give the same token. A token's reported
log-probability is the policy's, untruncated (`policy_logprobs`).
"""

from __future__ import annotations

import torch


def sampling_logits(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                    top_p: torch.Tensor) -> torch.Tensor:
    """logits (N, V); temperature, top_p (N,) float; top_k (N,) long, 0 = off -> (N, V) float32.

    The log-softmax of the result is each row's sampling distribution (greedy rows: the plain
    distribution, whose argmax they take).
    """
    is_greedy = temperature <= 0
    scaled = logits.float() / torch.where(is_greedy, 1.0, temperature)[:, None]
    if bool(((top_k > 0) | (top_p < 1)).any()):
        scaled = _truncate(scaled, top_k, top_p)
    return scaled


def sampling_probs(scaled: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """(N, V) probabilities to draw from: softmax of `sampling_logits`, one-hot for greedy rows."""
    probs = torch.softmax(scaled, dim=-1)
    is_greedy = temperature <= 0
    if bool(is_greedy.any()):
        one_hot = torch.zeros_like(probs).scatter_(1, scaled.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(is_greedy[:, None], one_hot, probs)
    return probs


def _truncate(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) tokens outside each row's top-k and top-p nucleus."""
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    rank = torch.arange(scaled.shape[-1])[None]
    outside_k = (top_k[:, None] > 0) & (rank >= top_k[:, None])
    sorted_logits = sorted_logits.masked_fill(outside_k, float("-inf"))
    sorted_probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs  # mass of strictly more likely tokens
    outside_p = mass_before >= top_p[:, None]  # the top token always stays (mass_before = 0)
    sorted_logits = sorted_logits.masked_fill(outside_p, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(1, order, sorted_logits)


def sample_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: probs (N, V) (need not be normalised), u (N,) in (0, 1) -> tokens (N,) long."""
    cdf = probs.double().cumsum(-1)  # (N, V)
    target = u.double() * cdf[:, -1]
    tokens = torch.searchsorted(cdf, target[:, None], right=True).squeeze(-1)
    return tokens.clamp_(max=probs.shape[-1] - 1)


def policy_logprobs(logits: torch.Tensor, tokens: torch.Tensor,
                    temperature: torch.Tensor | float) -> torch.Tensor:
    """Log-probability of each token under the policy: log_softmax(logits / temperature) over the
    whole vocabulary (temperature 0: the plain softmax, whose argmax a greedy row takes).

    logits (..., V); tokens (...) long; temperature a float or (...) -> (...) float32.

    This is specroll's one definition of a token's log-probability: the engine reports it for every
    emitted token and the trainer recomputes it, so the importance ratio pi_theta / pi_rollout is 1
    before any update (to the rounding between the engine's forward and the trainer's) whatever the
    sampling settings. Top-k and top-p shape only which tokens are drawn: the log-probability of the
    truncated, renormalised distribution would carry log(kept mass) into every ratio, a factor that is
    no policy change. It is also what TRL's GRPOTrainer computes on its side (log_softmax of the
    logits over its temperature, over the whole vocabulary).
    """
    if isinstance(temperature, torch.Tensor):
        scale = torch.where(temperature > 0, temperature, 1.0).to(torch.float32)[..., None]
    else:
        scale = temperature if temperature > 0 else 1.0
    scaled = logits.float() / scale
    return torch.log_softmax(scaled, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)
