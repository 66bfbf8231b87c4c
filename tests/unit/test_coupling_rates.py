"""The coupling rates on literal cases and against sampling with the engine's own rule."""

from __future__ import annotations

import torch

from specroll.drafting.coupling_rates import (
    argmax_rate,
    gumbel_rate,
    gumbel_rate_closed,
    inverse_cdf_rate,
    maximal_rate,
)
from specroll.sampling import sample_from


def test_literal_rates():
    p = torch.tensor([[0.5, 0.5, 0.0]])
    q = torch.tensor([[0.0, 0.5, 0.5]])
    assert maximal_rate(p, q).item() == 0.5
    assert inverse_cdf_rate(p, q).item() == 0.0  # intervals [0.5,1) for token 1 under p, [0,.5) under q
    assert argmax_rate(p, q).item() == 0.5
    assert inverse_cdf_rate(p, p).item() == 1.0 and maximal_rate(p, p).item() == 1.0


def test_inverse_cdf_rate_is_what_shared_uniforms_give():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(4, 50) * 2, -1)
    q = torch.softmax(torch.randn(4, 50) * 2 + 3 * p.log(), -1)
    u = torch.rand(20000)
    for row in range(4):
        a = sample_from(p[row].expand(len(u), -1), u)
        b = sample_from(q[row].expand(len(u), -1), u)
        assert (
            abs((a == b).float().mean().item() - inverse_cdf_rate(p[row : row + 1], q[row : row + 1]).item())
            < 0.02
        )


def test_no_coupling_beats_the_maximal_one():
    torch.manual_seed(1)
    p = torch.softmax(torch.randn(16, 30) * 2, -1)
    q = torch.softmax(torch.randn(16, 30) * 2, -1)
    best = maximal_rate(p, q)
    for rate in (inverse_cdf_rate(p, q), gumbel_rate(p, q, 2000), argmax_rate(p, q)):
        assert torch.all(rate <= best + 0.03)
    tv = 1 - best
    assert torch.all(gumbel_rate(p, q, 2000) >= (1 - tv) / (1 + tv) - 0.04)


def test_the_closed_form_gumbel_rate_is_what_shared_gumbel_noise_gives():
    torch.manual_seed(2)
    p = torch.softmax(torch.randn(6, 40) * 2, -1)
    q = torch.softmax(torch.randn(6, 40) * 2 + p.log(), -1)
    closed = gumbel_rate_closed(p, q.log(), torch.zeros(6))
    assert torch.allclose(closed, gumbel_rate(p, q, 4000), atol=0.02)
    assert torch.allclose(gumbel_rate_closed(p, p.log(), torch.zeros(6)), torch.ones(6), atol=1e-5)


def test_the_closed_form_on_a_sparse_support_counts_q_outside_it():
    torch.manual_seed(3)
    p = torch.softmax(torch.randn(6, 40) * 2, -1)
    q = torch.softmax(torch.randn(6, 40) * 2 + p.log(), -1)
    p[:, 10:] = 0  # the support: the first 10 tokens (p need not be normalised on it)
    on_support = gumbel_rate_closed(p[:, :10], q[:, :10].log(), q[:, 10:].sum(-1))
    assert torch.allclose(on_support, gumbel_rate(p, q, 4000), atol=0.02)
    # q's mass outside the support only takes wins away
    assert torch.all(on_support < gumbel_rate_closed(p[:, :10], q[:, :10].log(), torch.zeros(6)))


def test_the_closed_form_is_differentiable_in_q():
    p = torch.tensor([[0.6, 0.3, 0.1]])
    logits = torch.zeros(1, 3, requires_grad=True)
    gumbel_rate_closed(p, torch.log_softmax(logits, -1), torch.zeros(1)).sum().backward()
    assert logits.grad[0, 0] > 0 > logits.grad[0, 2]  # moving q toward p raises the rate
