"""Top-k and prompt log-probabilities (vLLM's `logprobs: k` and `prompt_logprobs: k`), by one more
forward of the served model over prompt + output, in the engine thread between forwards.

The numbers are the engine's: the forward is its prefill (the engine's model, numerics and kernels, a
cache of its dtype) and each position's log-probabilities are `sampling.softmax(tempered(logits), log=
True)` at the request's temperature, as `policy_logprobs` gives the sampled tokens. With batch-invariant
numerics a position's logits are the same bits in this prefill as in the decode or verification that
drew its token, so a sampled token's entry here equals the log-probability the engine reported with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from specroll.model.runner import SequenceInput
from specroll.sampling import softmax, tempered


@dataclass(frozen=True)
class PositionLogprobs:
    """One position's distribution, as reported: its `k` most likely tokens and the given token."""

    token_id: int  # the token at this position (prompt or output)
    logprob: float
    rank: int  # 1 + how many tokens are more likely
    top_ids: tuple[int, ...]  # most likely first
    top_logprobs: tuple[float, ...]


class Scorer:
    """Scoring forwards of an engine's model; built and run in the engine thread."""

    def __init__(self, engine) -> None:
        self.runner = engine.scoring_runner()
        self.dtype = engine.lm_head_weight().dtype

    @torch.inference_mode()
    def score(
        self, token_ids: Sequence[int], first: int, temperature: float, k: int
    ) -> list[PositionLogprobs]:
        """The log-probabilities of token_ids[first:], each given the tokens before it (first >= 1)."""
        num = len(token_ids) - first
        self.runner.use_new_cache(1, len(token_ids), self.dtype)
        sequence = SequenceInput(0, 0, list(token_ids[:-1]), num_logits=num)
        logits = self.runner.forward([sequence]).logits[0, :num].float()  # (num, V)
        temperatures = torch.full((num,), temperature, dtype=torch.float32, device=logits.device)
        logprobs = softmax(tempered(logits, temperatures), log=True)  # (num, V)
        return positions(logprobs, token_ids[first:], k)


def positions(logprobs: torch.Tensor, token_ids: Sequence[int], k: int) -> list[PositionLogprobs]:
    """Each row's given token, its rank and the row's top k; logprobs (T, V), token_ids T. One read back
    to the host a tensor, not one a position."""
    given = torch.tensor(list(token_ids), dtype=torch.long, device=logprobs.device)
    chosen = logprobs.gather(-1, given[:, None])  # (T, 1)
    ranks = (logprobs > chosen).sum(-1) + 1  # (T,)
    top = logprobs.topk(k, dim=-1)  # (T, k), k may be 0
    rows = zip(token_ids, chosen[:, 0].tolist(), ranks.tolist(), top.indices.tolist(), top.values.tolist())
    return [PositionLogprobs(int(t), lp, rank, tuple(ids), tuple(lps)) for t, lp, rank, ids, lps in rows]


def score_choices(engine: Any, call: Any, choices: list) -> None:
    """Fill finished choices' `output_scores` (top_logprobs asked) and `prompt_scores` (prompt_logprobs
    asked), one scoring forward a choice over its prompt and output; `call` is their `GenerateCall`."""
    scorer = Scorer(engine)
    k = max(call.top_logprobs, call.prompt_logprobs or 0)
    for c in choices:
        tokens = [*c.prompt_token_ids, *c.token_ids]
        first = 1 if call.prompt_logprobs is not None else len(c.prompt_token_ids)
        if first >= len(tokens):
            continue
        rows = scorer.score(tokens, first, call.params.temperature, k)
        split = len(c.prompt_token_ids) - first
        if call.prompt_logprobs is not None:
            c.prompt_scores = [_top(r, call.prompt_logprobs) for r in rows[:split]]
        if call.top_logprobs:
            c.output_scores = [_top(r, call.top_logprobs) for r in rows[split:]]


def _top(row: PositionLogprobs, k: int) -> PositionLogprobs:
    return replace(row, top_ids=row.top_ids[:k], top_logprobs=row.top_logprobs[:k])
