"""The gumbel sampling rule: exact in distribution, keyed (the same noise gives the same token), and
a drafter drawing q by it matches the target more often than by inverting CDFs in vocabulary order."""

from __future__ import annotations

import torch

from specroll.drafting.coupling_rates import inverse_cdf_rate
from specroll.noise import gumbels, uniforms
from specroll.sampling import sample_two_stage, top_candidates


def _draw(probs: torch.Tensor, request_ids: torch.Tensor, k: int) -> torch.Tensor:
    """One draw per request id from the same distribution, by the rule with keyed noise."""
    rows = probs.expand(len(request_ids), -1)
    top_ids, top_probs = top_candidates(rows, k)
    positions = torch.zeros(len(request_ids), 1, dtype=torch.long)
    noise = gumbels(5, request_ids[:, None], positions, top_ids)
    u = uniforms(5, request_ids, positions[:, 0], 0)
    return sample_two_stage(rows, top_ids, top_probs, u, noise)


def test_the_rule_draws_exactly_from_p_inside_and_outside_the_top_tokens():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(40) * 1.5, -1)
    n = 40000
    for k in (1, 5, 40):  # the top stage only, both stages, the race over every token
        draws = _draw(p, torch.arange(n), k)
        freq = torch.bincount(draws, minlength=40).double() / n
        assert (freq - p.double()).abs().max() < 4 * (
            p.double() * (1 - p.double()) / n
        ).sqrt().max() + 1e-3, k


def test_the_same_noise_gives_the_same_token_and_a_zero_probability_token_never_wins():
    p = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])
    ids = torch.arange(2000)
    first, second = _draw(p, ids, 3), _draw(p, ids, 3)
    assert torch.equal(first, second)
    assert not torch.isin(first, torch.tensor([1, 4])).any()


def test_a_close_draft_matches_more_often_than_by_inverse_cdf():
    torch.manual_seed(2)
    p = torch.softmax(torch.randn(300, 200) * 2, -1)
    q = torch.softmax(torch.log(p) + 0.5 * torch.randn(300, 200), -1)  # a near, imperfect draft
    ids = torch.arange(300)
    positions = torch.zeros(300, 1, dtype=torch.long)
    u = uniforms(9, ids, positions[:, 0], 0)
    matches = []
    for dist in (p, q):
        top_ids, top_probs = top_candidates(dist, 64)
        noise = gumbels(9, ids[:, None], positions, top_ids)
        matches.append(sample_two_stage(dist, top_ids, top_probs, u, noise))
    gumbel_rate = (matches[0] == matches[1]).float().mean().item()
    assert gumbel_rate > inverse_cdf_rate(p, q).mean().item() + 0.1
