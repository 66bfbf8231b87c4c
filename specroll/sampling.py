"""Sampling as pure functions: logits and explicit uniforms in, distributions and tokens out.

Each row of a batch may carry its own temperature, top-k and top-p. A row's *sampling distribution*
is softmax(logits / temperature) restricted to the top-k tokens and then to the smallest set whose
mass reaches top-p (the nucleus of Holtzman et al. 2020), renormalised; temperature 0 is greedy, a
one-hot on the argmax. A token's reported log-probability is the policy's, untruncated
(`policy_logprobs`). A distribution at a temperature alone, untruncated (a drafter's q, a draft head's
distillation target and its evaluation), is `tempered_softmax`, under the same convention for
temperature 0; its most likely tokens are `top_candidates`.

Two rules draw a token from a distribution and explicit keyed noise (`specroll.sampling_rules`),
so that the same noise and the same distribution always give the same token:
- inverse-cdf: invert the CDF, in vocabulary order, at one uniform (`sample_from`);
- gumbel: a two-stage draw (`sample_two_stage`). The uniform first decides whether the token is among
  the distribution's `GUMBEL_TOP` most likely ones (with their mass m): if so, the token is the
  argmax of log p_v + g_v over them, with Gumbel noise g_v keyed by the token itself (Gumbel-max:
  exactly p_v / m); else the CDF of the others is inverted at the rescaled uniform. So
  P(v) = m * p_v / m for a top token and (1 - m) * p_v / (1 - m) for another: exactly p. A drafter
  drawing its own q by the same rule with the same noise matches the target's sample with about
  Gumbel-max coupling's probability (at least (1 - TV) / (1 + TV), and order-free), where inverting
  both CDFs in vocabulary order matches only where their intervals overlap (measured on SmolLM2: 0.34
  against 0.47 a token for a draft head, `specroll head eval`). Only the top tokens get noise: a
  Gumbel for each of 49k tokens costs a CPU more than the forward it serves.

Every reduction over the vocabulary (softmax, log-softmax, the CDF's running sum, a row's total)
runs in an order fixed per row, so a row's distribution and draw do not depend on how many rows
are sampled with it: on the CPU torch's kernels (a running sum in order, measured invariant) and
specroll's inverse-CDF kernel (that running sum's bits, `sample_from`), on a
GPU the Triton row kernels (`specroll.kernels.rows`) wherever no gradient is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class SamplingRows:
    """Each row's sampling settings, on the logits' device, and what the host knows of them (so
    that no step asks the device whether a filter is on: that would be a host synchronisation)."""

    temperature: torch.Tensor  # (N,) float32; 0 = greedy
    top_k: torch.Tensor  # (N,) long; 0 = off
    top_p: torch.Tensor  # (N,) float32; 1 = off
    is_truncated: bool  # some row has top-k or top-p on: the sort runs
    has_greedy: bool  # some row is greedy
    is_unit_temperature: bool = False  # every row at temperature 1: tempering is the identity

    @classmethod
    def build(
        cls,
        temperature: Sequence[float],
        top_k: Sequence[int],
        top_p: Sequence[float],
        device: torch.device | str = "cpu",
    ) -> "SamplingRows":
        return cls(
            torch.tensor(temperature, dtype=torch.float32, device=device),
            torch.tensor(top_k, dtype=torch.long, device=device),
            torch.tensor(top_p, dtype=torch.float32, device=device),
            *sampling_flags(temperature, top_k, top_p),
        )

    def select(self, rows: torch.Tensor) -> "SamplingRows":
        """The settings of `rows` (indices), in that order; the host's flags stay as they were (a
        filter or a greedy row they report may be among the rows left out: that costs a sort or a
        branch, never a wrong sample)."""
        pick = lambda t: t.index_select(0, rows)  # noqa: E731
        return SamplingRows(
            pick(self.temperature),
            pick(self.top_k),
            pick(self.top_p),
            self.is_truncated,
            self.has_greedy,
            self.is_unit_temperature,
        )


def sampling_flags(
    temperature: Sequence[float], top_k: Sequence[int], top_p: Sequence[float]
) -> tuple[bool, bool, bool]:
    """What the host knows of a batch's sampling: (some row truncates, some row is greedy, every row
    samples at temperature 1)."""
    is_truncated = any(k > 0 for k in top_k) or any(p < 1 for p in top_p)
    return is_truncated, any(t <= 0 for t in temperature), all(t == 1.0 for t in temperature)


def tempered(logits: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """logits (..., V) over the temperature (a float, or one per row (...)), in float32; a greedy row
    (temperature 0) keeps its logits: its argmax is taken, its log-probabilities are the plain ones."""
    if isinstance(temperature, torch.Tensor):
        return logits.float() / temperature.masked_fill(temperature <= 0, 1.0).float()[..., None]
    return logits.float() / (temperature if temperature > 0 else 1.0)


def tempered_rows(logits: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
    """`tempered` at each row's temperature; where every row's is 1 (RL's usual setting), the
    division by 1, exact and so the identity, is skipped: a pass over every logit of the batch
    (SmolLM2 at batch 64: some 4 ms of a 110 ms step on one CPU thread). The result may be `logits`
    itself (float32 logits): read it, never write it."""
    return logits.float() if rows.is_unit_temperature else tempered(logits, rows.temperature)


def truncated(scaled: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
    """`tempered` logits (N, V) with the tokens outside each row's top-k and top-p nucleus at -inf."""
    return _truncate(scaled, rows.top_k, rows.top_p) if rows.is_truncated else scaled


def sampling_logits(logits: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
    """logits (N, V) -> (N, V) float32 whose log-softmax is each row's sampling distribution (greedy
    rows: the plain distribution, whose argmax they take)."""
    return truncated(tempered(logits, rows.temperature), rows)


def sampling_probs(scaled: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
    """(N, V) probabilities to draw from: softmax of `sampling_logits`, one-hot for greedy rows."""
    return _softmax_or_one_hot(scaled, rows.temperature <= 0 if rows.has_greedy else None)


def tempered_softmax(logits: torch.Tensor, temperature: float | Sequence[float]) -> torch.Tensor:
    """softmax(logits / temperature) in float32, the one tempered softmax: logits (..., V) with one
    temperature, or (N, V) with one a row -> (..., V). Temperature 0 is greedy, as everywhere here: the
    one-hot on the argmax, the softmax's limit as the temperature falls to 0, and what a greedy row
    draws (`sampling_probs`). The temperatures are the host's, so no step asks the device which row
    is greedy."""
    if isinstance(temperature, (int, float)):
        scaled = tempered(logits, float(temperature))
        is_greedy = torch.tensor(True, device=logits.device) if temperature <= 0 else None
    else:
        rows = torch.tensor(temperature, dtype=torch.float32, device=logits.device)  # (N,)
        scaled = tempered(logits, rows)
        is_greedy = rows <= 0 if any(t <= 0 for t in temperature) else None
    return _softmax_or_one_hot(scaled, is_greedy)


def _on_gpu_kernels(x: torch.Tensor) -> bool:
    """Whether a reduction over x's rows runs as a Triton row kernel: on a GPU, with no gradient."""
    return x.is_cuda and not (x.requires_grad and torch.is_grad_enabled())


def softmax(x: torch.Tensor, log: bool = False) -> torch.Tensor:
    """(log-)softmax over the last dimension of float32 x, each row's bits its own (module docstring)."""
    if _on_gpu_kernels(x):
        from specroll.kernels.rows import softmax_rows

        return softmax_rows(x, log)
    return torch.log_softmax(x, dim=-1) if log else torch.softmax(x, dim=-1)


def running_sum(x: torch.Tensor) -> torch.Tensor:
    """The running sum over the last dimension of float64 x, in vocabulary order per row."""
    if _on_gpu_kernels(x):
        from specroll.kernels.rows import cumsum_rows

        return cumsum_rows(x)
    return x.cumsum(-1)


def row_total(x: torch.Tensor) -> torch.Tensor:
    """The sum over the last dimension of float64 x: on a GPU the running sum's last element (one
    order per row), on the CPU torch's sum."""
    return running_sum(x)[..., -1] if _on_gpu_kernels(x) else x.sum(-1)


def _softmax_or_one_hot(scaled: torch.Tensor, is_greedy: torch.Tensor | None) -> torch.Tensor:
    """softmax of `tempered` logits (..., V), the rows where is_greedy (... or ()) holds one-hot on
    their argmax; None: no row is greedy."""
    probs = softmax(scaled)
    if is_greedy is None:
        return probs
    one_hot = torch.zeros_like(probs).scatter_(-1, scaled.argmax(-1, keepdim=True), 1.0)
    return torch.where(is_greedy[..., None], one_hot, probs)


def _truncate(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) tokens outside each row's top-k and top-p nucleus."""
    sorted_logits, order = scaled.sort(dim=-1, descending=True, stable=scaled.is_cuda)  # ties by id on a GPU
    rank = torch.arange(scaled.shape[-1], device=scaled.device)[None]
    outside_k = (top_k[:, None] > 0) & (rank >= top_k[:, None])
    sorted_logits = sorted_logits.masked_fill(outside_k, float("-inf"))
    sorted_probs = softmax(sorted_logits)
    mass_before = running_sum(sorted_probs) - sorted_probs  # mass of strictly more likely tokens
    outside_p = mass_before >= top_p[:, None]  # the top token always stays (mass_before = 0)
    sorted_logits = sorted_logits.masked_fill(outside_p, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(1, order, sorted_logits)


def sample_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: probs (N, V) (need not be normalised), u (N,) in (0, 1) -> tokens (N,) long.

    The draw is the first token whose running sum in float64 exceeds u times the row's total. On a
    CPU with specroll's kernels one C++ pass finds it (`cpu_kernels.ops.inverse_cdf`, the same bits
    as the running sum below): a batch of 64 rows over SmolLM2's 49,152 tokens took 22 ms as torch's
    float64 copy, running sum and search, 0.8 ms so."""
    if _cpu_inverse_cdf_serves(probs):
        from specroll.cpu_kernels.ops import inverse_cdf

        return inverse_cdf(probs, u)
    cdf = running_sum(probs.double())  # (N, V)
    target = u.double() * cdf[:, -1]
    tokens = torch.searchsorted(cdf, target[:, None], right=True).squeeze(-1)
    return tokens.clamp_(max=probs.shape[-1] - 1)


def _cpu_inverse_cdf_serves(probs: torch.Tensor) -> bool:
    """Whether `sample_from` draws with the CPU kernel: float rows on the CPU, no gradient, the
    kernels wanted and built here, and no graph being traced (a captured step records torch's ops,
    which give the same tokens)."""
    if torch.compiler.is_compiling():
        return False
    is_float = probs.dtype in (torch.float32, torch.float64)
    if probs.device.type != "cpu" or probs.dim() != 2 or not is_float or probs.requires_grad:
        return False
    from specroll.placement import cpu_kernels_ready

    return cpu_kernels_ready()


GUMBEL_TOP = 64


def top_candidates(probs: torch.Tensor, k: int = GUMBEL_TOP) -> tuple[torch.Tensor, torch.Tensor]:
    """probs (N, V) -> the k most likely tokens' ids and probabilities (N, k), most likely first."""
    k = min(k, probs.shape[-1])
    if probs.is_cuda:  # a stable sort: ties in id order, whatever the batch
        values, ids = probs.sort(-1, descending=True, stable=True)
        return ids[..., :k], values[..., :k]
    top = probs.topk(k, -1)
    return top.indices, top.values


def sample_two_stage(
    probs: torch.Tensor, top_ids: torch.Tensor, top_probs: torch.Tensor, u: torch.Tensor, gumbel: torch.Tensor
) -> torch.Tensor:
    """The gumbel rule's draw (module docstring). probs (N, V) need not be normalised; top_ids and
    top_probs (N, k) from `top_candidates`; u (N,) uniform; gumbel (N, k) the noise of the top tokens
    -> tokens (N,) long."""
    total = row_total(probs.double())
    mass = row_total(top_probs.double()) / total  # (N,) m
    race = top_probs.double().log() + gumbel  # log 0 = -inf never wins
    top_token = top_ids.gather(-1, race.argmax(-1, keepdim=True)).squeeze(-1)
    rest = probs.scatter(-1, top_ids, 0.0)
    rescaled = ((u.double() - mass) / (1.0 - mass).clamp_min(1e-300)).clamp(0.0, 1.0)
    rest_token = sample_from(rest, rescaled)
    in_top = (u.double() < mass) | (rest.sum(-1) <= 0)  # rounding can leave u >= m with nothing else
    return torch.where(in_top, top_token, rest_token)


def policy_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: torch.Tensor | float
) -> torch.Tensor:
    """Log-probability of each token under the policy: log_softmax(logits / temperature) over the
    whole vocabulary (temperature 0: the plain softmax, whose argmax a greedy row takes).

    logits (..., V); tokens (...) long; temperature a float or (...) -> (...) float32.

    This is specroll's one definition of a token's log-probability: the engine reports it for every
    emitted token and the trainer recomputes it, so the importance ratio pi_theta / pi_rollout is 1
    before any update whatever the sampling settings: to the bit where the trainer's forward runs the
    engine's batch-invariant numerics (`specroll.train.policy_forward`), to rounding with the fast ones.
    Top-k and top-p shape only which tokens are drawn: the log-probability of the truncated,
    renormalised distribution would carry log(kept mass) into every ratio, a factor that is no policy
    change. It is also what TRL's GRPOTrainer computes on its side (log_softmax of the
    logits over its temperature, over the whole vocabulary).
    """
    return token_logprobs(tempered(logits, temperature), tokens)


def token_logprobs(scaled: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """`policy_logprobs` from logits already `tempered` (..., V), for a caller that has them."""
    return softmax(scaled, log=True).gather(-1, tokens[..., None]).squeeze(-1)
