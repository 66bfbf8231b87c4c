"""The GRPO objective as pure functions of tensors (Shao et al. 2024, with DAPO's token-level mean).

- advantages: each response's reward minus its group's mean, over the group's standard deviation;
- the policy term: PPO's clipped importance ratio pi_theta / pi_rollout per token, where pi_rollout is
  the log-probability the rollout engine reported for the sampled token (so no second forward of
  the old policy is needed, and speculation, being lossless, leaves it unchanged); both sides are
  `specroll.sampling.policy_logprobs`, so before an update the ratio is 1 whatever top-k or top-p;
- optionally a KL penalty to a frozen reference policy (the k3 estimator, always >= 0);
- every token of the batch weighs the same (the token-level mean).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


def group_advantages(rewards: Sequence[float], group_ids: Sequence[int], eps: float = 1e-6) -> torch.Tensor:
    """(N,) float32: (r - mean of its group) / (std of its group + eps); 0 in a group of equal rewards."""
    values = torch.tensor(rewards, dtype=torch.float64)
    out = torch.zeros_like(values)
    for group in set(group_ids):
        rows = torch.tensor([i for i, g in enumerate(group_ids) if g == group])
        chosen = values[rows]
        std = chosen.std(unbiased=False) if len(rows) > 1 else torch.tensor(0.0, dtype=torch.float64)
        out[rows] = (chosen - chosen.mean()) / (std + eps)
    return out.float()


@dataclass(frozen=True)
class LossTerms:
    loss: torch.Tensor  # the sum over the given tokens; divide by the batch's token count outside
    clipped: int  # tokens whose ratio was clipped
    kl_sum: float  # sum of the per-token KL estimate (0 without a reference)
    max_log_ratio: float  # the largest |log pi_theta - log pi_rollout| over the given tokens


def policy_loss(
    new_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> LossTerms:
    """new/rollout/ref logprobs and mask (B, T), advantages (B,) -> summed clipped surrogate loss."""
    ratio = torch.exp(new_logprobs - rollout_logprobs)
    adv = advantages[:, None]
    unclipped, clipped = ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl_sum = 0.0
    if ref_logprobs is not None and kl_coef > 0:
        log_ratio = ref_logprobs - new_logprobs
        kl = torch.exp(log_ratio) - log_ratio - 1  # k3: unbiased for KL(pi_theta || pi_ref), >= 0
        per_token = per_token + kl_coef * kl
        kl_sum = float((kl * mask).sum().detach())
    was_clipped = (clipped < unclipped) & mask.bool()
    gap = float(((new_logprobs - rollout_logprobs).abs() * mask).max().detach()) if mask.numel() else 0.0
    return LossTerms((per_token * mask).sum(), int(was_clipped.sum()), kl_sum, gap)
