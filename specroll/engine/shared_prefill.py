"""A group's samples share their prompt: its context is computed once per prefill forward.

GRPO and DAPO sample G responses to each prompt, and a group's requests are admitted together, so a
prefill forward holds the same prompt G times. The forward computes it once (`SharedPrefill.computed`),
the other requests' caches receive a copy of its K/V, and each request verifies the logits of the
row that computed its context (`SharedPrefill.row_of`): its own first token, by its own keyed noise.
Under batch-invariant numerics a row's logits and K/V are the same bits whatever else the forward
holds, so every token and log-probability is the one an unshared prefill gives (exact mode's records
do not change); what changes is the prefill's cost, 1/G of it. Only a request with nothing cached
shares (a preempted one recomputes its prompt and output, which differ within a group).
Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class SharedPrefill:
    """computed: indices of the requests whose context the forward computes, in their order.
    row_of:   for each request, the row of the forward (an index into `computed`) whose logits and K/V
              are its own."""

    computed: list[int]
    row_of: list[int]

    @property
    def copies(self) -> list[tuple[int, int]]:
        """(request that computes, request that receives a copy of its K/V), as request indices."""
        computed = set(self.computed)
        return [(self.computed[row], i) for i, row in enumerate(self.row_of) if i not in computed]


def plan_shared_prefill(contexts: Sequence[Sequence[int]], fresh: Sequence[bool]) -> SharedPrefill:
    """contexts: each request's tokens to compute; fresh: whether it has nothing cached (only those
    share). The first of equal fresh contexts computes it for the rest."""
    computed: list[int] = []
    row_of: list[int] = []
    first_row: dict[tuple[int, ...], int] = {}
    for i, (context, is_fresh) in enumerate(zip(contexts, fresh, strict=True)):
        key = tuple(context)
        if is_fresh and key in first_row:
            row_of.append(first_row[key])
            continue
        if is_fresh:
            first_row[key] = len(computed)
        row_of.append(len(computed))
        computed.append(i)
    return SharedPrefill(computed, row_of)
