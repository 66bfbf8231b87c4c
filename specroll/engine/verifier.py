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

from specroll.drafting.draft_tree import accepted_path
from specroll.drafting.protocol import Draft, Drafter, DraftQuery
from specroll.engine.request import Request
from specroll.engine.verify_inputs import VerifyInputs, verify_inputs
from specroll.noise import STREAM_ACCEPT, STREAM_SAMPLE, gumbels, uniforms
from specroll.sampling import (
    sample_from,
    sample_two_stage,
    sampling_probs,
    tempered_rows,
    token_logprobs,
    top_candidates,
    truncated,
)
from specroll.verification import verify_exact, verify_rejection
from specroll.sampling_rules import DEFAULT_SAMPLING_RULE, INVERSE_CDF

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifyResult:
    """Per request of one forward.

    token_ids / logprobs: the emitted tokens and their log-probabilities under the target policy
                       (`policy_logprobs`: untruncated, at the request's temperature).
    num_accepted: draft tokens accepted.
    accepted_nodes: for tree drafts, the accepted nodes (indices into the draft), root first; their
                    K/V must move to consecutive cache positions. None for linear drafts.
    hidden: the forward's features at its logit rows (B, Tl, F), on the device, for a feature-reading
            drafter; None where the forward did not keep them.
    """

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    num_accepted: list[int]
    accepted_nodes: list[list[int] | None]
    hidden: torch.Tensor | None = None

    def select(self, keep: Sequence[int]) -> VerifyResult:
        """The results of the requests at indices `keep`, in that order."""
        pick = lambda values: [values[i] for i in keep]  # noqa: E731
        hidden = None if self.hidden is None else self.hidden[list(keep)]
        return VerifyResult(
            pick(self.token_ids),
            pick(self.logprobs),
            pick(self.num_accepted),
            pick(self.accepted_nodes),
            hidden,
        )


def build_drafts(
    drafter: Drafter,
    requests: Sequence[Request],
    budgets: Sequence[int],
    vocab_size: int,
    allow_trees: bool,
    tree: bool = False,
) -> list[Draft]:
    """Each request's draft of at most its budget (`tree`: the policy asks for trees)."""
    queries = [
        DraftQuery(
            r.request_id,
            r.group_id,
            r.context(),
            len(r.prompt_token_ids),
            k,
            *_sampling(r.params),
            noise_key=r.noise_key,
            tree=tree,
        )
        for r, k in zip(requests, budgets)
        if k > 0
    ]
    try:
        proposed = {d.request_id: d for d in drafter.propose(queries)}
    except Exception:  # a failing drafter costs this forward's speed-up, never the rollout
        log.exception("drafter %s failed; this forward verifies no drafts", drafter.name)
        proposed = {}
    return [
        _sanitised(proposed.get(r.request_id), r.request_id, k, vocab_size, allow_trees)
        for r, k in zip(requests, budgets)
    ]


def _sampling(params) -> tuple[float, int, float]:
    return params.temperature, params.top_k, params.top_p


def _sanitised(
    draft: Draft | None, request_id: int, budget: int, vocab_size: int, allow_trees: bool
) -> Draft:
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
        return _sanitised(
            Draft(request_id, draft.token_ids[: draft.main_chain_length], source=draft.source),
            request_id,
            budget,
            vocab_size,
            allow_trees,
        )
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


def verify_batch(
    requests: Sequence[Request],
    drafts: Sequence[Draft],
    logits: torch.Tensor,
    seed: int,
    mode: str,
    rule: str = DEFAULT_SAMPLING_RULE,
) -> VerifyResult:
    """logits (B, Tl, V): row 0 follows the fed token, row i + 1 follows draft node i."""
    B, Tl, V = logits.shape
    inputs = verify_inputs(requests, drafts, Tl, V, logits.device)
    live = live_positions(drafts, Tl, logits.device) if mode == "exact" else None
    packed = verify_on_device(logits, inputs, seed, mode, rule, live).cpu()  # the step's one copy to the host
    return per_request(drafts, *unpack(packed))


def live_positions(drafts: Sequence[Draft], Tl: int, device: torch.device) -> torch.Tensor | None:
    """The flat (B * Tl) indices of the logit rows whose samples a step reads: row b's first
    1 + drafts[b].num_tokens (the rest pad the row to the widest draft). None where every row is read."""
    if all(d.num_tokens + 1 == Tl for d in drafts):
        return None
    live = [b * Tl + j for b, d in enumerate(drafts) for j in range(d.num_tokens + 1)]
    return torch.tensor(live, dtype=torch.long, device=device)


def verify_on_device(
    logits: torch.Tensor,
    inputs: VerifyInputs,
    seed: int,
    mode: str,
    rule: str = DEFAULT_SAMPLING_RULE,
    live: torch.Tensor | None = None,
) -> torch.Tensor:
    """The device part of verification: no host synchronisation, so it can be captured in a graph.
    In exact mode the target's samples follow `rule` (`specroll.sampling_rules`).

    logits (B, Tl, V) -> (B, 2 Tl + 1) float64 packing each row's emitted token (exact in float64),
    its log-probability and the number of accepted drafts (`unpack`). live (exact mode): the flat
    indices of the rows read (`live_positions`); only they are sampled, each as it would be among all
    (every row's sampling reads its own logits alone), and the others hold token 0 and log-probability
    0, never read."""
    B, Tl, V = logits.shape
    sample_u = uniforms(seed, inputs.request_ids, inputs.positions, STREAM_SAMPLE)  # (B, Tl)
    if mode == "exact":
        flat, u = logits.reshape(B * Tl, V), sample_u.view(-1)
        emitted, logprobs = _exact_rows(flat, u, inputs, seed, rule, live)
        emitted, logprobs = emitted.view(B, Tl), logprobs.view(B, Tl)
        num_accepted = verify_exact(inputs.draft_tokens, inputs.num_drafts, emitted)
        return torch.cat([emitted.double(), logprobs.double(), num_accepted.double()[:, None]], 1)
    scaled = tempered_rows(logits.reshape(B * Tl, V), inputs.rows)  # (B*Tl, V), once for both uses
    probs = sampling_probs(truncated(scaled, inputs.rows), inputs.rows).view(B, Tl, V)
    accept_u = uniforms(seed, inputs.request_ids, inputs.positions[:, :-1], STREAM_ACCEPT)  # (B, K)
    num_accepted, next_token = verify_rejection(
        probs, inputs.draft_probs, inputs.draft_tokens, inputs.num_drafts, accept_u, sample_u
    )
    emitted = torch.cat([inputs.draft_tokens, inputs.draft_tokens.new_zeros(B, 1)], 1)
    emitted = emitted.scatter(1, num_accepted[:, None], next_token[:, None])
    logprobs = token_logprobs(scaled, emitted.view(-1)).view(B, Tl)  # the policy's (`policy_logprobs`)
    return torch.cat([emitted.double(), logprobs.double(), num_accepted.double()[:, None]], 1)


def _exact_rows(
    logits: torch.Tensor,
    u: torch.Tensor,
    inputs: VerifyInputs,
    seed: int,
    rule: str,
    live: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits (B*Tl, V), u (B*Tl,) -> the target's token at each row's output position and its
    log-probability (`policy_logprobs`), (B*Tl,) each; with `live`, only those rows are computed."""
    Tl = inputs.positions.shape[1]
    request_ids = inputs.request_ids.expand(-1, Tl).reshape(-1)
    positions, rows = inputs.positions.reshape(-1), inputs.rows
    if live is not None:
        logits, u, rows = logits.index_select(0, live), u.index_select(0, live), rows.select(live)
        request_ids, positions = request_ids.index_select(0, live), positions.index_select(0, live)
    scaled = tempered_rows(logits, rows)  # once for both uses
    probs = sampling_probs(truncated(scaled, rows), rows)
    if rule == INVERSE_CDF:
        tokens = sample_from(probs, u)
    else:
        top_ids, top_probs = top_candidates(probs)  # (N, k)
        noise = gumbels(seed, request_ids[:, None], positions[:, None], top_ids)  # (N, k)
        tokens = sample_two_stage(probs, top_ids, top_probs, u, noise)
    logprobs = token_logprobs(scaled, tokens)
    if live is None:
        return tokens, logprobs
    num_rows = inputs.positions.numel()
    return (
        tokens.new_zeros(num_rows).index_copy(0, live, tokens),
        logprobs.new_zeros(num_rows).index_copy(0, live, logprobs),
    )


def unpack(packed: torch.Tensor) -> tuple[list[list[int]], list[list[float]], list[int]]:
    """`verify_on_device`'s output, on the host: tokens, log-probabilities, accepted counts per row."""
    Tl = (packed.shape[1] - 1) // 2
    values = packed.tolist()
    return (
        [[int(t) for t in row[:Tl]] for row in values],
        [row[Tl : 2 * Tl] for row in values],
        [int(row[-1]) for row in values],
    )


def per_request(
    drafts: Sequence[Draft], tokens: list[list[int]], values: list[list[float]], accepted: list[int]
) -> VerifyResult:
    """Each request's emitted rows: 0..n for a chain; for a tree, the root row and the row after each
    accepted node (a row's sample is the target's token there, and accepted tokens equal it)."""
    nodes: list[list[int] | None] = []
    out_tokens, out_logprobs = [], []
    for b, d in enumerate(drafts):
        if d.is_tree:
            path = accepted_path(d.token_ids, d.parents, lambda node, _: tokens[b][node + 1])
            rows = [0, *(p + 1 for p in path)]
            accepted[b] = len(path)
            nodes.append(path)
        else:
            rows = range(accepted[b] + 1)
            nodes.append(None)
        out_tokens.append([tokens[b][r] for r in rows])
        out_logprobs.append([values[b][r] for r in rows])
    return VerifyResult(out_tokens, out_logprobs, accepted, nodes)
