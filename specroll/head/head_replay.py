"""Replaying a recorded rollout through a draft head: the tokens a forward its drafts would give.

In exact mode a recorded response is the target's own samples under the run's seed and sampling rule,
so whether a draft would be kept needs no target forward: a draft node is kept where its path spells
the response's next tokens. The replay steps every response as the engine does after its prefill:
the drafter gets the target's state that drew the newest token (from a teacher-forced forward, with
batch-invariant numerics the very bits of the engine's), proposes for a budget (a chain's tokens or a
tree's nodes), keeps the longest matching path and one token more, and moves on. With the engine's
seed, rule, thread count and a fixed budget, the replay's figure is the engine's own; it runs in the
time of the teacher-forced forwards and the head's steps, so drafting choices (tree shapes, budgets)
are compared in seconds rather than in rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from specroll.drafting.draft_head import DraftHeadDrafter
from specroll.drafting.protocol import Draft, DraftQuery, TargetFeatures
from specroll.head.features import FeatureSequence


@dataclass(frozen=True)
class ReplayedResponse:
    request_id: int  # the engine's id: part of the keys of its sampling noise
    prompt: tuple[int, ...]
    response: tuple[int, ...]
    features: FeatureSequence  # teacher-forced over prompt + response
    max_tokens: int  # the request's limit (the engine drafts at most one short of what remains)


@dataclass(frozen=True)
class ReplayResult:
    budget: int
    rows: int  # request-forwards after the prefill
    emitted: int  # tokens they emitted

    @property
    def tokens_per_forward(self) -> float:
        return self.emitted / self.rows if self.rows else 0.0


@torch.no_grad()
def replay(
    drafter: DraftHeadDrafter, responses: Sequence[ReplayedResponse], budget: int, temperature: float = 1.0
) -> ReplayResult:
    """Every response stepped as the engine steps it at a fixed `budget`, all of them batched."""
    done = [1] * len(responses)  # output tokens committed: the prefill drew the first
    rows = emitted = 0
    while True:
        active = [i for i, r in enumerate(responses) if done[i] < len(r.response)]
        if not active:
            return ReplayResult(budget, rows, emitted)
        drafter.observe_features(_features(responses, active, done))
        limits = [min(budget, responses[i].max_tokens - done[i] - 1) for i in active]  # as the engine
        queries = [_query(responses[i], done[i], k, temperature) for i, k in zip(active, limits)]
        drafts = drafter.propose([q for q in queries if q.budget > 0])
        by_id = {d.request_id: d for d in drafts}
        for i, query in zip(active, queries):
            r, k = responses[i], done[i]
            draft = by_id.get(r.request_id, Draft(r.request_id))
            step = min(draft.kept_in_exact_mode(r.response[k:]) + 1, len(r.response) - k)
            done[i] += step
            rows, emitted = rows + 1, emitted + step
        for i in active:
            if done[i] >= len(responses[i].response):
                drafter.finish(responses[i].request_id)


def _features(responses: Sequence[ReplayedResponse], active: list[int], done: list[int]) -> TargetFeatures:
    """The state that drew each active response's newest token, as the engine hands it over."""
    rows = [responses[i].features.hidden[done[i] - 1] for i in active]
    tokens = [responses[i].features.tokens for i in active]
    return TargetFeatures(
        request_ids=tuple(responses[i].request_id for i in active),
        hidden=torch.stack(rows),
        num_kept=(1,) * len(active),
        context_lengths=tuple(len(responses[i].prompt) + done[i] for i in active),
        token_ids=tuple(
            (int(t[done[i] - 1]), responses[i].response[done[i] - 1]) for i, t in zip(active, tokens)
        ),
    )


def _query(response: ReplayedResponse, done: int, budget: int, temperature: float) -> DraftQuery:
    return DraftQuery(
        response.request_id,
        0,
        [*response.prompt, *response.response[:done]],
        len(response.prompt),
        budget,
        temperature,
    )
