"""The GRPO objective on literal values."""

from __future__ import annotations

import math

import pytest
import torch

from specroll.sampling import policy_logprobs
from specroll.train.grpo import group_advantages, policy_loss


def test_advantages_are_normalised_within_each_group():
    adv = group_advantages([1.0, 0.0, 1.0, 0.0, 5.0, 5.0], [0, 0, 0, 0, 1, 1])
    assert adv[:4].tolist() == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-5)
    assert adv[4:].tolist() == [0.0, 0.0]  # equal rewards teach nothing
    assert group_advantages([3.0], [7]).tolist() == [0.0]


def test_token_logprobs_follow_the_sampling_temperature():
    logits = torch.tensor([[[2.0, 0.0, -1.0]]])
    tokens = torch.tensor([[0]])
    expected = 2.0 / 0.5 - math.log(math.exp(4.0) + 1.0 + math.exp(-2.0))
    assert policy_logprobs(logits, tokens, 0.5).item() == pytest.approx(expected, rel=1e-6)
    assert policy_logprobs(logits, tokens, 0.0).item() == pytest.approx(
        policy_logprobs(logits, tokens, 1.0).item()
    )


def test_the_ratio_is_clipped_on_the_side_the_advantage_pushes():
    rollout = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))  # ratios 1.5, 0.5, 1.1
    mask = torch.ones(1, 3)
    up = policy_loss(new, rollout, torch.tensor([1.0]), mask, clip_eps=0.2)
    assert up.loss.item() == pytest.approx(-(1.2 + 0.5 + 1.1), rel=1e-6)  # only 1.5 is clipped (to 1.2)
    assert up.clipped == 1
    down = policy_loss(new, rollout, torch.tensor([-1.0]), mask, clip_eps=0.2)
    assert down.loss.item() == pytest.approx(1.5 + 0.8 + 1.1, rel=1e-6)  # 0.5 is clipped (to 0.8)
    assert down.clipped == 1
    assert up.max_log_ratio == pytest.approx(math.log(2.0), rel=1e-6)  # |log 0.5| is the largest


def test_masked_tokens_and_the_kl_penalty():
    new = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 0.0]])
    terms = policy_loss(
        new, new.detach(), torch.tensor([0.0]), mask, ref_logprobs=torch.tensor([[-1.5, -9.0]]), kl_coef=0.1
    )
    kl = math.exp(-0.5) + 0.5 - 1  # k3 at the one unmasked token
    assert terms.kl_sum == pytest.approx(kl, rel=1e-6)
    assert terms.loss.item() == pytest.approx(0.1 * kl, rel=1e-6)
    terms.loss.backward()
    assert new.grad[0, 1] == 0.0  # the masked token gets no gradient
    same = policy_loss(new, new.detach(), torch.tensor([0.0]), mask, ref_logprobs=new.detach(), kl_coef=0.1)
    assert same.kl_sum == 0.0
