"""How well a head's drafts would match the target, measured on feature sequences (teacher-forced):
at each depth d, the head's distribution q (from the real hidden state d-1 tokens back, fed the real
tokens) against the target's p, under every coupling of `specroll.drafting.coupling_rates`; both at the
sampling temperature (`tempered_softmax`: at 0, the one-hot on the argmax, where every coupling is
argmax agreement)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from specroll.drafting.coupling_rates import (
    argmax_rate,
    gumbel_rate,
    inverse_cdf_rate,
    maximal_rate,
    ranked_rate,
    two_stage_rate,
)
from specroll.drafting.draws import tempered_softmax
from specroll.head.features import FeatureSequence
from specroll.drafting.head_model import DraftHead
from specroll.sampling_rules import GUMBEL, INVERSE_CDF

RATES = {
    "argmax": argmax_rate,
    INVERSE_CDF: inverse_cdf_rate,
    "ranked-64": ranked_rate,
    "gumbel-64 (--sampling-rule gumbel)": two_stage_rate,
    GUMBEL: lambda p, q: gumbel_rate(p, q, 16),
    "maximal": maximal_rate,
}


@dataclass(frozen=True)
class CouplingReport:
    depth: int
    num_positions: int
    rates: dict[str, float]  # coupling -> mean rate at which the draft equals the target's sample


@torch.no_grad()
def coupling_report(
    head: DraftHead,
    embedding: torch.Tensor,
    lm_head_weight: torch.Tensor,
    sequences: Sequence[FeatureSequence],
    depth: int = 3,
    temperature: float = 1.0,
    chunk: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> list[CouplingReport]:
    """Every depth's mean rates over every sequence; `progress(done, total)` after each chunk, in
    drafts measured (a chunk of 256 is seconds of work, a long response minutes)."""
    sums = [dict.fromkeys(RATES, 0.0) for _ in range(depth)]
    counts = [0] * depth
    H = lm_head_weight.shape[1]
    total = sum(max(s.num_positions - d, 0) for s in sequences for d in range(1, depth + 1))
    if progress is not None:
        progress(0, total)
    for seq in sequences:
        previous = head.first_feature(seq.hidden)
        N = seq.num_positions
        for d in range(1, min(depth, N - 1) + 1):
            current = head.step(previous[: N - d], embedding[seq.tokens[d:]])
            for start in range(0, N - d, chunk):
                part = slice(start, min(start + chunk, N - d))
                p = tempered_softmax(seq.hidden[d:, :H][part] @ lm_head_weight.T, temperature)
                q_draft = tempered_softmax(head.logits(current[part]), temperature)
                q = p.new_zeros(p.shape).index_copy_(1, head.draft_to_target, q_draft)
                for name, rate in RATES.items():
                    sums[d - 1][name] += float(rate(p, q).sum())
                counts[d - 1] += p.shape[0]
                if progress is not None:
                    progress(sum(counts), total)
            previous = current
    return [
        CouplingReport(d + 1, counts[d], {k: v / max(counts[d], 1) for k, v in sums[d].items()})
        for d in range(depth)
    ]
