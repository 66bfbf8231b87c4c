"""Verification math: literal cases, and rejection sampling's output distribution equal to the target's."""

from __future__ import annotations

import torch

from specroll.verification import accepted_prefix, verify_exact, verify_rejection


def test_exact_accepts_longest_matching_prefix():
    drafts = torch.tensor([[5, 6, 7], [5, 9, 7], [1, 2, 3], [5, 6, 7]])
    num_drafts = torch.tensor([3, 3, 3, 2])
    target = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8]])
    assert verify_exact(drafts, num_drafts, target).tolist() == [3, 1, 0, 2]


def test_exact_ignores_padding_beyond_num_drafts():
    assert accepted_prefix(torch.tensor([[True, True, True]]), torch.tensor([0])).tolist() == [0]


def test_rejection_literal_deterministic_drafts():
    p = torch.tensor([[[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]])  # (1, 3, V)
    u = torch.full((1, 2), 0.5)
    sample_u = torch.full((1, 3), 0.5)
    # drafts equal the target's certain tokens: both accepted, bonus is token 0
    n, nxt = verify_rejection(p, None, torch.tensor([[1, 2]]), torch.tensor([2]), u, sample_u)
    assert (n.item(), nxt.item()) == (2, 0)
    # second draft wrong: one accepted, recovered token 2 (all of p's mass)
    n, nxt = verify_rejection(p, None, torch.tensor([[1, 3]]), torch.tensor([2]), u, sample_u)
    assert (n.item(), nxt.item()) == (1, 2)
    # first draft wrong: nothing accepted, recovered token 1
    n, nxt = verify_rejection(p, None, torch.tensor([[3, 2]]), torch.tensor([2]), u, sample_u)
    assert (n.item(), nxt.item()) == (0, 1)


def _empirical(target: torch.Tensor, draft: torch.Tensor, num_samples: int, k: int, seed: int):
    """First emitted token's histogram under speculative sampling with a sampling drafter."""
    g = torch.Generator().manual_seed(seed)
    V = target.shape[0]
    draft_tokens = torch.multinomial(draft, num_samples * k, replacement=True, generator=g).view(
        num_samples, k
    )
    p = target.expand(num_samples, k + 1, V)
    q = draft.expand(num_samples, k, V)
    n, nxt = verify_rejection(
        p,
        q,
        draft_tokens,
        torch.full((num_samples,), k),
        torch.rand(num_samples, k, generator=g, dtype=torch.float64),
        torch.rand(num_samples, k + 1, generator=g, dtype=torch.float64),
    )
    first = torch.where(n > 0, draft_tokens[:, 0], nxt)
    return torch.bincount(first, minlength=V).double() / num_samples, n


def test_rejection_sampling_approximates_target_distribution():
    """In the manner of vLLM's test: the KL to the target shrinks as samples grow, for random p, q."""
    g = torch.Generator().manual_seed(0)
    V, k = 10, 3
    for trial in range(3):
        target = torch.softmax(torch.randn(V, generator=g) * 2, -1)
        draft = torch.softmax(torch.randn(V, generator=g) * 2, -1)
        distances = []
        for num_samples in (1_000, 100_000):
            hist, _ = _empirical(target, draft, num_samples, k, seed=trial)
            distances.append((hist - target).abs().sum().item())
        uniform_distance = (torch.full((V,), 1 / V) - target).abs().sum().item()
        assert distances[1] < distances[0] or distances[1] < 0.01
        assert distances[1] < 0.02 < uniform_distance


def test_rejection_with_one_hot_drafts_follows_target():
    g = torch.Generator().manual_seed(3)
    V, num_samples = 6, 200_000
    target = torch.softmax(torch.randn(V, generator=g), -1)
    draft_tokens = torch.full((num_samples, 1), 2)
    p = target.expand(num_samples, 2, V)
    n, nxt = verify_rejection(
        p,
        None,
        draft_tokens,
        torch.ones(num_samples, dtype=torch.long),
        torch.rand(num_samples, 1, generator=g, dtype=torch.float64),
        torch.rand(num_samples, 2, generator=g, dtype=torch.float64),
    )
    first = torch.where(n > 0, draft_tokens[:, 0], nxt)
    hist = torch.bincount(first, minlength=V).double() / num_samples
    assert (hist - target).abs().max() < 0.005
    assert abs(n.double().mean().item() - target[2].item()) < 0.005  # acceptance rate = p(x)
