"""How an engine takes queued requests in: when it admits them, and how their prefills share forwards.

Imports no torch: the engine's scheduler and prefill follow these rules, and so do the simulator's
workers (`specroll.sim.worker`) when they stand for specroll's engines.
"""

from __future__ import annotations

from typing import Sequence

from specroll.model.attention_chunks import plan_chunks

ADMIT_FRACTION = 0.125  # a busy engine admits once this share of its slots is free: fewer, larger prefills
MAX_PREFILL_FORWARDS = 4  # the most forwards one admission's prefills are cut into


def is_admission_due(
    num_running: int,
    num_free_slots: int,
    num_waiting: int,
    num_slots: int,
    admit_fraction: float = ADMIT_FRACTION,
) -> bool:
    """Admit now, or wait for more free slots: an engine with requests running waits until
    `admit_fraction` of its slots are free (or as many as there are waiting requests) rather than
    prefill one request per iteration; an idle engine admits at once."""
    enough = max(1, int(admit_fraction * num_slots))
    return num_running == 0 or num_free_slots >= min(enough, num_waiting)


def num_to_admit(prefill_tokens: Sequence[float], num_free_slots: int, max_prefill_tokens: float) -> int:
    """How many waiting requests, in queue order (`prefill_tokens`: each one's context to compute), one
    admission takes: one per free slot while their prefills stay within `max_prefill_tokens` (the
    first always goes). The scheduler also stops where the KV budget would be exceeded."""
    taken, total = 0, 0.0
    for tokens in prefill_tokens[:num_free_slots]:
        if taken and total + tokens > max_prefill_tokens:
            break
        taken, total = taken + 1, total + tokens
    return taken


def plan_prefill_forwards(
    num_tokens: Sequence[int], min_saving: int, max_forwards: int = MAX_PREFILL_FORWARDS
) -> list[list[int]]:
    """The prefill forwards of requests admitted together, as indices into `num_tokens` (each one's
    context to compute): longest first, cut into at most `max_forwards` forwards where a cut saves
    `min_saving` padded tokens (a prefill pads every row to its forward's longest; a forward costs a
    fixed overhead). The same planner as attention chunks (`plan_chunks`)."""
    order = sorted(range(len(num_tokens)), key=lambda i: -num_tokens[i])
    chunks = plan_chunks([num_tokens[i] for i in order], max_forwards, min_saving)
    return [order[c.first : c.end] for c in chunks]
