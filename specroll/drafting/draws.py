"""How a drafter with a distribution turns its logits into draft tokens (`DRAWS`), shared by the draft
model and the draft head.

- argmax: the drafter's most likely token, deterministic (q = one-hot): exact verification's simplest.
- coupled: from q, the drafter's distribution under the request's temperature, top-k and top-p, by
  exact mode's sampling rule with the very noise the target's draw uses at the same output position
  (`noise.STREAM_SAMPLE`, and under the gumbel rule each token's own Gumbel noise; `sampling`).
  Exact mode keeps a draft token only where it equals the target's own
  sample, so the closer q is to p, the more drafts match; where q = p every one does. Inverse-CDF
  coupling in vocabulary order is not a maximal coupling: a draft and the target's sample match only
  where their CDF intervals overlap, so it can agree less often than 1 - TV(p, q); the gumbel rule
  nears Gumbel-max coupling (BENCHMARKS.md measures both).
- sample (rejection verification): from softmax(logits / T) with the drafter's own keyed stream
  (`STREAM_DRAFT`), reporting q, which speculative sampling needs.

A tree of drafts takes a node's first `width` candidates (`ranked_candidates`): the draw above first,
then the tokens that came next in the same contest (the race of log q + the target's noise under the
gumbel rule; q's order otherwise), each with a score for choosing among the tree's nodes.

q at a temperature alone is sampling's `tempered_softmax` (temperature 0: the one-hot on the argmax),
and a distribution's most likely tokens its `top_candidates`; the draft head's training and evaluation,
which sit above the drafters and not on sampling, take both from here.

A drafter over a reduced vocabulary passes `vocab_map` (draft index -> target id, ascending): its CDF
then runs in the target's order, and q is reported over the target's vocabulary (zero elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from specroll.drafting.protocol import DraftQuery
from specroll.noise import STREAM_DRAFT, STREAM_SAMPLE, gumbels, uniforms
from specroll.sampling import (
    SamplingRows,
    sample_from,
    sample_two_stage,
    sampling_logits,
    sampling_probs,
    tempered_softmax,
    top_candidates,
)
from specroll.sampling_rules import DEFAULT_SAMPLING_RULE, INVERSE_CDF

DRAWS = ("argmax", "coupled", "sample")


def check_draw(draw: str) -> None:
    if draw not in DRAWS:
        raise ValueError(f"draw must be one of {', '.join(DRAWS)}, got {draw!r}")


def draw_tokens(
    draw: str,
    logits: torch.Tensor,
    queries: Sequence[DraftQuery],
    depth: int,
    seed: int,
    vocab_map: torch.Tensor | None = None,
    vocab_size: int | None = None,
    rule: str = DEFAULT_SAMPLING_RULE,
) -> tuple[list[int], list[torch.Tensor | None]]:
    """Each query's draft token at `depth` (0 = the token after its context) from logits (B, V'), and
    q (V,) per row where the draw reports it (sample), else None."""
    if draw == "argmax":
        drawn = logits.argmax(-1)
        probs = None
    elif draw == "coupled":
        drawn, probs = _coupling(logits, queries, depth, seed, rule, vocab_map).drawn, None
    else:
        drawn, probs = _sampled(logits, queries, depth, seed)
    tokens = (drawn if vocab_map is None else vocab_map[drawn]).tolist()
    if probs is None:
        return tokens, [None] * len(queries)
    if vocab_map is not None:
        probs = probs.new_zeros(len(queries), vocab_size).index_copy_(1, vocab_map, probs)
    return tokens, list(probs)


@dataclass(frozen=True)
class _Coupling:
    """A coupled draw and what it was drawn from: q and, under the gumbel rule, the race of log q +
    the target's noise over q's top tokens, with the noise's keys. The draw is from q with the
    target's noise for output position (outputs so far + depth)."""

    probs: torch.Tensor  # (B, V') q under each row's sampling settings
    drawn: torch.Tensor  # (B,) draft ids
    top_ids: torch.Tensor | None = None  # (B, k)
    race: torch.Tensor | None = None  # (B, k) float64
    keys: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, 1) request ids and output positions


def _coupling(
    logits: torch.Tensor,
    queries: Sequence[DraftQuery],
    depth: int,
    seed: int,
    rule: str,
    vocab_map: torch.Tensor | None,
) -> _Coupling:
    device = logits.device
    probs = _q(logits, queries)
    ids = torch.tensor([q.noise_id for q in queries], device=device)
    positions = torch.tensor([len(q.context) - q.num_prompt_tokens + depth for q in queries], device=device)
    u = uniforms(seed, ids, positions, STREAM_SAMPLE)
    if rule == INVERSE_CDF:
        return _Coupling(probs, sample_from(probs, u))
    top_ids, top_probs = top_candidates(probs)
    target_ids = top_ids if vocab_map is None else vocab_map[top_ids]  # the noise is keyed by target id
    noise = gumbels(seed, ids[:, None], positions[:, None], target_ids)
    drawn = sample_two_stage(probs, top_ids, top_probs, u, noise)
    race = top_probs.double().log() + noise
    return _Coupling(probs, drawn, top_ids, race, (ids[:, None], positions[:, None]))


def _q(logits: torch.Tensor, queries: Sequence[DraftQuery]) -> torch.Tensor:
    """(B, V') the drafter's distribution under each row's temperature, top-k and top-p."""
    temperature, top_k, top_p = zip(*((q.temperature, q.top_k, q.top_p) for q in queries))
    rows = SamplingRows.build(temperature, top_k, top_p, logits.device)
    return sampling_probs(sampling_logits(logits, rows), rows)


def _sampled(
    logits: torch.Tensor, queries: Sequence[DraftQuery], depth: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    device = logits.device
    q_probs = tempered_probs(logits, queries)  # (B, V')
    ids = torch.tensor([q.noise_id for q in queries], device=device)
    positions = torch.tensor([len(q.context) + depth for q in queries], device=device)
    return sample_from(q_probs, uniforms(seed, ids, positions, STREAM_DRAFT)), q_probs


def tempered_probs(logits: torch.Tensor, queries: Sequence[DraftQuery]) -> torch.Tensor:
    """(B, V') the drafter's `tempered_softmax` at each query's temperature (a greedy request's: the
    one-hot on its argmax), in float32: the q a sampled draft reports, and the score a drawn token is
    given."""
    return tempered_softmax(logits, [q.temperature for q in queries])


def ranked_candidates(
    draw: str,
    logits: torch.Tensor,
    queries: Sequence[DraftQuery],
    depth: int,
    seed: int,
    width: int,
    vocab_map: torch.Tensor | None = None,
    rule: str = DEFAULT_SAMPLING_RULE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's `width` best candidates for a tree node at `depth`: target ids (B, width), the
    row's `draw_tokens` token first, then the runners-up; and their scores (B, width) in [0, 1].

    Under the gumbel rule the runners-up are the next entries of the race of log q + the target's
    noise, and a candidate's score is its share of a softmax over the candidates' race values (a wide
    margin makes the winner's near 1). Otherwise they follow q, scored by q (the first candidate, the
    best guess of the target's sample, by the largest)."""
    if draw not in ("argmax", "coupled"):
        raise ValueError(f"trees are drafted with the argmax or coupled draw, not {draw!r}")
    if draw == "coupled":
        coupling = _coupling(logits, queries, depth, seed, rule, vocab_map)
    else:
        coupling = _Coupling(_q(logits, queries), logits.argmax(-1))
    probs, first = coupling.probs, coupling.drawn
    if coupling.race is not None:
        top_ids, race = coupling.top_ids, coupling.race
    else:
        top_ids, race = top_candidates(probs)
        race = race.double()
    race = race.masked_fill(top_ids == first[:, None], float("-inf"))  # the first candidate is `first`
    order = race.argsort(-1, descending=True)[:, : width - 1]
    candidates = torch.cat([first[:, None], top_ids.gather(-1, order)], 1)  # (B, width) draft ids
    if coupling.race is not None:  # the draw may come from outside the top: its own race entry
        first_ids = first if vocab_map is None else vocab_map[first]
        first_race = probs.gather(-1, first[:, None]).double().log() + gumbels(
            seed, *coupling.keys, first_ids[:, None]
        )
        values = torch.cat([first_race, race.gather(-1, order)], 1)
        scores = torch.softmax(values.nan_to_num(neginf=-1e300), -1).float()
    else:  # q's order; a coupled draw, the best guess of the target's sample, as the most likely
        scores = probs.gather(-1, candidates)
        scores[:, 0] = scores.amax(-1)
    tokens = candidates if vocab_map is None else vocab_map[candidates]
    return tokens, scores
