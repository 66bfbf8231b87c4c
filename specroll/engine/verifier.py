"""Bridges a batch of requests and the pure sampling and verification math.

`build_drafts` asks the drafter and sanitises what it returns (a drafter can only cost speed, so a
bad proposal is cut, never trusted). `verify_batch` turns a forward's logits and the drafts into each
request's emitted tokens and their log-probabilities, with noise keyed by (seed, request, position).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import torch

from specroll.drafting.protocol import Draft, Drafter, DraftQuery
from specroll.engine.request import Request
from specroll.noise import STREAM_ACCEPT, STREAM_SAMPLE, uniforms
from specroll.sampling import sample_from, sampling_logits, sampling_probs, token_logprobs
from specroll.verification import verify_exact, verify_rejection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifyResult:
    """Per request of one forward: emitted tokens, their target log-probabilities, drafts accepted."""

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    num_accepted: list[int]


def build_drafts(drafter: Drafter, requests: Sequence[Request], budgets: Sequence[int], vocab_size: int) -> list[Draft]:
    queries = [DraftQuery(r.request_id, r.group_id, r.context(), len(r.prompt_token_ids), k, r.params.temperature)
               for r, k in zip(requests, budgets) if k > 0]
    try:
        proposed = {d.request_id: d for d in drafter.propose(queries)}
    except Exception:  # a failing drafter costs this step's speed-up, never the rollout
        log.exception("drafter %s failed; this step decodes without drafts", getattr(drafter, "name", drafter))
        proposed = {}
    return [_sanitised(proposed.get(r.request_id), r.request_id, k, vocab_size) for r, k in zip(requests, budgets)]


def _sanitised(draft: Draft | None, request_id: int, budget: int, vocab_size: int) -> Draft:
    """The draft's main chain, cut to the budget and before any token outside the vocabulary."""
    if draft is None or budget <= 0 or not draft.token_ids:
        return Draft(request_id)
    length = _chain_length(draft)
    tokens = []
    for token in draft.token_ids[: min(length, budget)]:
        if not 0 <= token < vocab_size:
            break
        tokens.append(int(token))
    probs = draft.probs[: len(tokens)] if draft.probs is not None and tokens else None
    return Draft(request_id, tokens, probs=probs)


def _chain_length(draft: Draft) -> int:
    if draft.parents is None:
        return len(draft.token_ids)
    n = 0
    while n < len(draft.parents) and draft.parents[n] == n - 1:
        n += 1
    return n


def verify_batch(requests: Sequence[Request], drafts: Sequence[Draft], logits: torch.Tensor,
                 seed: int, mode: str) -> VerifyResult:
    """logits (B, Tl, V): row b holds the target's logits after the fed token and each draft."""
    B, Tl, V = logits.shape
    params = _row_params(requests, Tl)
    scaled = sampling_logits(logits.reshape(B * Tl, V), *params)  # (B*Tl, V)
    probs = sampling_probs(scaled, params[0]).view(B, Tl, V)
    draft_tokens, num_drafts = _padded_drafts(drafts, Tl - 1)
    request_ids = torch.tensor([r.request_id for r in requests])[:, None]
    positions = torch.tensor([r.num_output_tokens for r in requests])[:, None] + torch.arange(Tl)  # (B, Tl)
    sample_u = uniforms(seed, request_ids, positions, STREAM_SAMPLE)  # (B, Tl)
    if mode == "exact":
        emitted = sample_from(probs.view(B * Tl, V), sample_u.view(-1)).view(B, Tl)
        num_accepted = verify_exact(draft_tokens, num_drafts, emitted)
    else:
        accept_u = uniforms(seed, request_ids, positions[:, :-1], STREAM_ACCEPT)  # (B, K)
        q = _draft_probs(drafts, draft_tokens, V)
        num_accepted, next_token = verify_rejection(probs, q, draft_tokens, num_drafts, accept_u, sample_u)
        emitted = torch.cat([draft_tokens, torch.zeros(B, 1, dtype=torch.long)], 1)
        emitted[torch.arange(B), num_accepted] = next_token
    logprobs = token_logprobs(scaled, emitted.view(-1)).view(B, Tl)
    return _per_request(emitted, logprobs, num_accepted)


def _row_params(requests: Sequence[Request], Tl: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each request's temperature, top_k and top_p, repeated over its Tl rows."""
    temperature = torch.tensor([r.params.temperature for r in requests], dtype=torch.float32)
    top_k = torch.tensor([r.params.top_k for r in requests], dtype=torch.long)
    top_p = torch.tensor([r.params.top_p for r in requests], dtype=torch.float32)
    return tuple(t.repeat_interleave(Tl) for t in (temperature, top_k, top_p))


def _padded_drafts(drafts: Sequence[Draft], K: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.zeros(len(drafts), K, dtype=torch.long)
    for b, d in enumerate(drafts):
        tokens[b, : d.num_tokens] = torch.tensor(d.token_ids, dtype=torch.long)
    return tokens, torch.tensor([d.num_tokens for d in drafts])


def _draft_probs(drafts: Sequence[Draft], draft_tokens: torch.Tensor, V: int) -> torch.Tensor | None:
    """(B, K, V) q: the drafter's probabilities, or one-hot rows for deterministic drafts."""
    if all(d.probs is None for d in drafts):
        return None
    q = torch.zeros(*draft_tokens.shape, V).scatter_(2, draft_tokens[..., None], 1.0)
    for b, d in enumerate(drafts):
        if d.probs is not None and d.num_tokens:
            q[b, : d.num_tokens] = torch.as_tensor(d.probs, dtype=torch.float32)[: d.num_tokens]
    return q


def _per_request(emitted: torch.Tensor, logprobs: torch.Tensor, num_accepted: torch.Tensor) -> VerifyResult:
    counts = (num_accepted + 1).tolist()
    tokens = emitted.tolist()
    values = logprobs.tolist()
    return VerifyResult(
        token_ids=[row[:n] for row, n in zip(tokens, counts)],
        logprobs=[row[:n] for row, n in zip(values, counts)],
        num_accepted=num_accepted.tolist(),
    )
