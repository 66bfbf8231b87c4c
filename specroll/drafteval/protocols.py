"""The two replay protocols: references from the same group, or from the same problem's earlier steps.

grouped: every response of a group is a target in turn; its references are the first `num_refs` other
         responses of its group in file order, fed in full before the target starts.
history: training steps are replayed in order, all problems at each step; a problem's response at every
         step after its first is a target, and each finished response is fed back as history, so a
         history drafter of window W sees the same problem's responses at the previous W steps.
Steps are the ordinal positions of a problem's recorded steps (0, 1, 2, ...), not checkpoint numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from specroll.drafteval.replay import ReplayStats, feed, replay
from specroll.drafting.protocol import Drafter, RequestInfo


@dataclass(frozen=True)
class TokenizedGroup:
    prompt: tuple[int, ...]
    responses: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class TokenizedHistory:
    prompt: tuple[int, ...]
    responses: tuple[tuple[int, ...], ...]  # one per training step, oldest first


def evaluate_grouped(
    groups: Sequence[TokenizedGroup], make_drafter: Callable[[], Drafter], num_refs: int, max_draft: int
) -> ReplayStats:
    """Every response of every group as a target, each with a fresh drafter and its references."""
    total = ReplayStats()
    for group_id, group in enumerate(groups):
        for target in range(len(group.responses)):
            drafter = make_drafter()
            others = [i for i in range(len(group.responses)) if i != target][:num_refs]
            for ref in others:
                total.observe_seconds += feed(
                    drafter, RequestInfo(ref, group_id, group.prompt), group.responses[ref]
                )
            info = RequestInfo(target, group_id, group.prompt)
            total.add(replay(drafter, info, group.responses[target], max_draft))
    return total


def evaluate_history(
    problems: Sequence[TokenizedHistory], make_drafter: Callable[[], Drafter], max_draft: int
) -> ReplayStats:
    """All problems through one drafter, step by step; each step after a problem's first is a target."""
    total = ReplayStats()
    drafter = make_drafter()
    request_ids = iter(range(1 << 62))
    num_steps = max((len(p.responses) for p in problems), default=0)
    for step in range(num_steps):
        started = time.perf_counter()
        drafter.advance_step(step)
        total.observe_seconds += time.perf_counter() - started
        for group_id, problem in enumerate(problems):
            if step >= len(problem.responses):
                continue
            info = RequestInfo(next(request_ids), group_id, problem.prompt, step)
            if step == 0:
                total.observe_seconds += feed(drafter, info, problem.responses[step])
            else:
                total.add(replay(drafter, info, problem.responses[step], max_draft))
    return total
