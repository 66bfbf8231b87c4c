"""The responses of a run's last few training steps, kept so that a resumed run's drafters start warm.

History drafters draft a problem's responses from its responses at the previous `DEFAULT_WINDOW`
steps (`specroll.drafting.history`). That state changes a rollout's speed, never its tokens, so a
resumed run would be correct without it, only slower for a few steps. Keeping the last window of
responses in the training state and replaying them through the drafter's lifecycle (begin, observe,
finish, advance_step: what the engine does while it rolls them out) restores it at a few integers a
token. The order of the replay is the requests', not their finish order, so a resumed history may
break ties between equally likely drafts differently; the speculation policy's running estimates
(e.g. acceptance) are not kept and are learnt again within the first forwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from specroll.drafting.history import DEFAULT_WINDOW
from specroll.drafting.protocol import Drafter, RequestInfo
from specroll.rollout import RolloutRecord


@dataclass(frozen=True)
class FinishedResponse:
    step: int  # the training step that rolled it out
    request_id: int
    group_id: int  # the problem's prompt_id
    token_ids: tuple[int, ...]


class RecentResponses:
    """The finished responses of the last `num_steps` training steps, oldest step first."""

    def __init__(self, num_steps: int = DEFAULT_WINDOW, responses: Iterable[FinishedResponse] = ()) -> None:
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        self.num_steps = num_steps
        self.responses = sorted(responses, key=lambda r: r.step)

    def add_step(self, step: int, records: Sequence[RolloutRecord]) -> None:
        """Keep step `step`'s responses (a refused request has none) and forget steps out of the window."""
        self.responses += [
            FinishedResponse(step, r.request_id, r.prompt_id, tuple(r.token_ids))
            for r in records
            if r.error is None
        ]
        self.responses = [r for r in self.responses if r.step > step - self.num_steps]

    def replay(self, drafter: Drafter, prompts: Mapping[int, Sequence[int]]) -> None:
        """Drive `drafter` through the kept responses as the engine did when it rolled them out;
        the caller then enters the next step (`Engine.advance_step`), which commits the last ones."""
        for step in sorted({r.step for r in self.responses}):
            drafter.advance_step(step)
            for r in (r for r in self.responses if r.step == step):
                drafter.begin(RequestInfo(r.request_id, r.group_id, tuple(prompts[r.group_id]), step))
                drafter.observe(r.request_id, list(r.token_ids))
                drafter.finish(r.request_id)
