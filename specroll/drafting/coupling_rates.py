"""How often a draft drawn from q equals the target's sample from p, under each way of coupling the two
draws: the measure that chooses exact mode's drafting rule.

In exact mode a draft token is kept only where it equals the target's own sample, and both are drawn
from shared keyed noise; the coupling decides how often they agree (Leviathan et al. 2023's
speculative sampling reaches sum_v min(p_v, q_v), a maximal coupling, but needs q and its own
rejection rule):

- `argmax_rate`: a deterministic draft, argmax q: p(argmax q).
- `inverse_cdf_rate`: both invert their CDF in vocabulary order at one uniform (specroll's exact
  sampling rule): they agree on token v for the length of the overlap of v's two CDF intervals.
- `gumbel_rate`: both take argmax(log prob + g) with shared Gumbel noise g (Monte Carlo over the
  given noise rows): invariant to the vocabulary's order, at least (1 - TV) / (1 + TV).
  `gumbel_rate_closed` is the same rate in closed form over a sparse support, differentiable in q
  (what a head's training can maximise).
- `maximal_rate`: sum_v min(p_v, q_v) = 1 - TV(p, q), what no coupling can beat.

All take p, q (N, V) probability rows and return each row's rate (N,).
"""

from __future__ import annotations

import torch


def maximal_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return torch.minimum(p, q).sum(-1)


def argmax_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return p.gather(-1, q.argmax(-1, keepdim=True)).squeeze(-1)


def inverse_cdf_rate(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    p, q = p.double(), q.double()
    p_hi, q_hi = p.cumsum(-1), q.cumsum(-1)
    lo = torch.maximum(p_hi - p, q_hi - q)
    return (torch.minimum(p_hi, q_hi) - lo).clamp_min(0).sum(-1).float()


def gumbel_rate(p: torch.Tensor, q: torch.Tensor, num_draws: int = 64, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator(device=p.device).manual_seed(seed)
    agree = torch.zeros(p.shape[0], device=p.device)
    log_p, log_q = p.clamp_min(1e-30).log(), q.clamp_min(1e-30).log()
    for _ in range(num_draws):
        u = torch.rand(p.shape, generator=generator, device=p.device).clamp(1e-12, 1 - 1e-12)
        g = -torch.log(-torch.log(u))
        agree += ((log_p + g).argmax(-1) == (log_q + g).argmax(-1)).float()
    return agree / num_draws


def gumbel_rate_closed(p: torch.Tensor, log_q: torch.Tensor, q_rest: torch.Tensor) -> torch.Tensor:
    """Gumbel-max coupling's rate, exactly: token v wins both races when g_v - g_w >=
    max(log p_w/p_v, log q_w/q_v) for every other w, which has probability
    1 / sum_w max(p_w/p_v, q_w/q_v); the rate is that summed over v.

    p (..., K): the target's probabilities on a support (p's top tokens; tokens outside it have
    p = 0, never win p's race, and count against v only through q). log_q (..., K): the draft's
    log-probabilities on the same tokens (-inf where it cannot propose one). q_rest (...): q's mass
    outside the support. Returns (...). K^2 work a row: for a sparse support, not a 49k vocabulary."""
    log_p = p.clamp_min(1e-30).log().masked_fill(p <= 0, -1e4)
    log_q = log_q.clamp_min(-1e4)
    ratio = torch.maximum(  # (..., v, w) log max(p_w/p_v, q_w/q_v)
        log_p[..., None, :] - log_p[..., :, None], log_q[..., None, :] - log_q[..., :, None]
    )
    outside = (q_rest.clamp_min(1e-30).log()[..., None] - log_q)[..., None]  # (..., v, 1)
    wins = torch.exp(-torch.logsumexp(torch.cat([ratio, outside], -1), -1))  # (..., v)
    return (wins * (p > 0)).sum(-1)


def ranked_order(p: torch.Tensor, k: int) -> torch.Tensor:
    """(N, V) token order of the ranked coupling: each row's k most likely tokens, most likely first
    (ties by id), then every other token in id order."""
    V = p.shape[-1]
    top = p.topk(min(k, V), -1).indices  # (N, k) descending; topk breaks ties by the lower index
    key = torch.arange(V, device=p.device).expand_as(p) + V  # untop tokens after, in id order
    key = key.scatter(-1, top, torch.arange(top.shape[-1], device=p.device).expand_as(top))
    return key.argsort(-1)


def ranked_rate(p: torch.Tensor, q: torch.Tensor, k: int = 64) -> torch.Tensor:
    """Both invert their CDF at one uniform, each in its own `ranked_order`: where p and q rank their
    likely tokens alike, their intervals line up from 0 and the rate nears the maximal one."""
    starts = []
    for dist in (p.double(), q.double()):
        order = ranked_order(dist, k)
        ranked = dist.gather(-1, order)
        before = ranked.cumsum(-1) - ranked
        starts.append(torch.empty_like(dist).scatter_(-1, order, before))
    lo = torch.maximum(starts[0], starts[1])
    hi = torch.minimum(starts[0] + p.double(), starts[1] + q.double())
    return (hi - lo).clamp_min(0).sum(-1).float()


def two_stage_rate(
    p: torch.Tensor, q: torch.Tensor, k: int = 64, num_draws: int = 16, seed: int = 0
) -> torch.Tensor:
    """The gumbel sampling rule's rate (`sampling.sample_two_stage`: Gumbel-max over each
    distribution's own k most likely tokens, else inverse CDF over the rest), by Monte Carlo over
    shared uniforms and per-token Gumbel noise."""
    from specroll.sampling import sample_two_stage, top_candidates

    generator = torch.Generator(device=p.device).manual_seed(seed)
    candidates = [top_candidates(dist, k) for dist in (p, q)]
    agree = torch.zeros(p.shape[0], device=p.device)
    for _ in range(num_draws):
        u = torch.rand(p.shape[0], generator=generator, device=p.device, dtype=torch.float64)
        noise = -torch.log(
            -torch.log(torch.rand(p.shape, generator=generator, device=p.device).clamp(1e-12, 1 - 1e-12))
        )
        drawn = [
            sample_two_stage(dist, ids, values, u, noise.gather(-1, ids).double())
            for dist, (ids, values) in zip((p, q), candidates)
        ]
        agree += (drawn[0] == drawn[1]).float()
    return agree / num_draws
