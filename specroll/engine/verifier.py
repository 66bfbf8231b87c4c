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
from specroll.sampling import policy_logprobs, sample_from, sampling_logits, sampling_probs
from specroll.verification import verify_exact, verify_exact_tree, verify_rejection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifyResult:
    """Per request of one forward.

    token_ids / logprobs: the emitted tokens and their log-probabilities under the target policy
                       (`policy_logprobs`: untruncated, at the request's temperature).
    num_accepted: draft tokens accepted.
    accepted_nodes: for tree drafts, the accepted nodes (indices into the draft), root first; their
                    K/V must move to consecutive cache positions. None for linear drafts.
    """

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    num_accepted: list[int]
    accepted_nodes: list[list[int] | None]


def build_drafts(drafter: Drafter, requests: Sequence[Request], budgets: Sequence[int], vocab_size: int,
                 allow_trees: bool) -> list[Draft]:
    queries = [DraftQuery(r.request_id, r.group_id, r.context(), len(r.prompt_token_ids), k, r.params.temperature)
               for r, k in zip(requests, budgets) if k > 0]
    try:
        proposed = {d.request_id: d for d in drafter.propose(queries)}
    except Exception:  # a failing drafter costs this forward's speed-up, never the rollout
        log.exception("drafter %s failed; this forward verifies no drafts", getattr(drafter, "name", drafter))
        proposed = {}
    return [_sanitised(proposed.get(r.request_id), r.request_id, k, vocab_size, allow_trees)
            for r, k in zip(requests, budgets)]


def _sanitised(draft: Draft | None, request_id: int, budget: int, vocab_size: int, allow_trees: bool) -> Draft:
    """At most `budget` nodes, none outside the vocabulary (nor below such a node); trees only if
    allowed, else the main chain. Probabilities are kept for linear drafts only."""
    if draft is None or budget <= 0 or not draft.token_ids:
        return Draft(request_id)
    if not draft.is_tree:
        tokens = []
        for token in draft.token_ids[:budget]:
            if not 0 <= token < vocab_size:
                break
            tokens.append(int(token))
        probs = draft.probs[: len(tokens)] if draft.probs is not None and tokens else None
        return Draft(request_id, tokens, probs=probs, source=draft.source)
    if not allow_trees:
        return _sanitised(Draft(request_id, draft.token_ids[: _chain_length(draft)], source=draft.source),
                          request_id, budget, vocab_size, allow_trees)
    return _pruned_tree(draft, request_id, budget, vocab_size)


def _pruned_tree(draft: Draft, request_id: int, budget: int, vocab_size: int) -> Draft:
    kept: dict[int, int] = {-1: -1}  # old index -> new index
    tokens, parents = [], []
    for i, (token, parent) in enumerate(zip(draft.token_ids, draft.parents)):
        if len(tokens) == budget:
            break
        if parent in kept and parent < i and 0 <= token < vocab_size:
            kept[i] = len(tokens)
            tokens.append(int(token))
            parents.append(kept[parent])
    return Draft(request_id, tokens, parents=parents, source=draft.source)


def _chain_length(draft: Draft) -> int:
    if draft.parents is None:
        return len(draft.token_ids)
    n = 0
    while n < len(draft.parents) and draft.parents[n] == n - 1:
        n += 1
    return n


def row_parents(draft: Draft) -> list[int] | None:
    """Parents of the forward's new tokens: the fed token (row 0) and then the draft's nodes."""
    if not draft.is_tree:
        return None
    return [-1, *(p + 1 for p in draft.parents)]


def verify_batch(requests: Sequence[Request], drafts: Sequence[Draft], logits: torch.Tensor,
                 seed: int, mode: str) -> VerifyResult:
    """logits (B, Tl, V): row 0 follows the fed token, row i + 1 follows draft node i."""
    B, Tl, V = logits.shape
    params = _row_params(requests, Tl)
    scaled = sampling_logits(logits.reshape(B * Tl, V), *params)  # (B*Tl, V)
    probs = sampling_probs(scaled, params[0]).view(B, Tl, V)
    draft_tokens, num_drafts = _padded_drafts(drafts, Tl - 1)
    request_ids = torch.tensor([r.request_id for r in requests])[:, None]
    positions = torch.tensor([r.num_output_tokens for r in requests])[:, None] + _row_depths(drafts, Tl)  # (B, Tl)
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
    logprobs = policy_logprobs(logits.reshape(B * Tl, V), emitted.view(-1), params[0]).view(B, Tl)
    return _per_request(drafts, emitted, logprobs, num_accepted)


def _row_depths(drafts: Sequence[Draft], Tl: int) -> torch.Tensor:
    """(B, Tl) depth of each row's context below the fed token: a chain's row i is at depth i."""
    depths = torch.arange(Tl).repeat(len(drafts), 1)
    for b, d in enumerate(drafts):
        if d.is_tree:
            row_depth = [0]
            for p in d.parents:
                row_depth.append(row_depth[p + 1] + 1)
            depths[b, : len(row_depth)] = torch.tensor(row_depth)
    return depths


def _row_params(requests: Sequence[Request], Tl: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each request's temperature, top_k and top_p, repeated over its Tl rows."""
    params = [r.params for r in requests for _ in range(Tl)]
    return (torch.tensor([p.temperature for p in params], dtype=torch.float32),
            torch.tensor([p.top_k for p in params], dtype=torch.long),
            torch.tensor([p.top_p for p in params], dtype=torch.float32))


def _padded_drafts(drafts: Sequence[Draft], K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, K) draft tokens padded with 0, and (B,) how many are real."""
    rows = [[*d.token_ids, *[0] * (K - len(d.token_ids))] for d in drafts]
    return (torch.tensor(rows, dtype=torch.long).view(len(drafts), K),
            torch.tensor([len(d.token_ids) for d in drafts]))


def _draft_probs(drafts: Sequence[Draft], draft_tokens: torch.Tensor, V: int) -> torch.Tensor | None:
    """(B, K, V) q: the drafter's probabilities, or one-hot rows for deterministic drafts."""
    if all(d.probs is None for d in drafts):
        return None
    q = torch.zeros(*draft_tokens.shape, V).scatter_(2, draft_tokens[..., None], 1.0)
    for b, d in enumerate(drafts):
        if d.probs is not None and d.num_tokens:
            q[b, : d.num_tokens] = torch.as_tensor(d.probs, dtype=torch.float32)[: d.num_tokens]
    return q


def _per_request(drafts: Sequence[Draft], emitted: torch.Tensor, logprobs: torch.Tensor,
                 num_accepted: torch.Tensor) -> VerifyResult:
    """Each request's emitted rows: 0..n for a chain; for a tree, the root row and the row after each
    accepted node (a row's sample is the target's token there, and accepted tokens equal it)."""
    tokens, values, accepted, nodes = emitted.tolist(), logprobs.tolist(), num_accepted.tolist(), []
    out_tokens, out_logprobs = [], []
    for b, d in enumerate(drafts):
        if d.is_tree:
            path = verify_exact_tree(d.token_ids, d.parents, tokens[b][: d.num_tokens + 1])
            rows = [0, *(p + 1 for p in path)]
            accepted[b] = len(path)
            nodes.append(path)
        else:
            rows = range(accepted[b] + 1)
            nodes.append(None)
        out_tokens.append([tokens[b][r] for r in rows])
        out_logprobs.append([values[b][r] for r in rows])
    return VerifyResult(out_tokens, out_logprobs, accepted, nodes)
