"""A set of drafters of which one proposes each forward: what a draft ladder (SpecActor §4.2) switches.

The set holds no choice of its own: the engine proposes with the member the policy's decision names
(`member`), and with the first member when the decision names none. Every member sees every
lifecycle call, so whichever is named next has its state up to date.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from specroll.drafting.protocol import BaseDrafter, Draft, Drafter, DraftQuery, RequestInfo


class SwitchingDrafter(BaseDrafter):
    name = "switching"

    def __init__(self, drafters: Mapping[str, Drafter]) -> None:
        if not drafters:
            raise ValueError("SwitchingDrafter needs at least one drafter")
        self.drafters = dict(drafters)
        self.member_names = frozenset(self.drafters)

    def member(self, name: str | None) -> Drafter:
        """The member called `name`; the first member when `name` is None."""
        if name is None:
            return next(iter(self.drafters.values()))
        if name not in self.drafters:
            raise ValueError(f"no drafter {name!r} here; have {', '.join(self.drafters)}")
        return self.drafters[name]

    def begin(self, info: RequestInfo) -> None:
        for drafter in self.drafters.values():
            drafter.begin(info)

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        return self.member(None).propose(queries)

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        for drafter in self.drafters.values():
            drafter.observe(request_id, token_ids)

    def finish(self, request_id: int) -> None:
        for drafter in self.drafters.values():
            drafter.finish(request_id)

    def advance_step(self, step: int) -> None:
        for drafter in self.drafters.values():
            drafter.advance_step(step)
