"""A set of drafters of which one proposes at a time: what a draft ladder (SpecActor §4.2) switches.

Every member sees every lifecycle call, so whichever is selected next has its state up to date.
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
        self.active = next(iter(self.drafters))

    def select(self, name: str) -> None:
        if name not in self.drafters:
            raise ValueError(f"no drafter {name!r} here; have {', '.join(self.drafters)}")
        self.active = name

    def begin(self, info: RequestInfo) -> None:
        for drafter in self.drafters.values():
            drafter.begin(info)

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        return self.drafters[self.active].propose(queries)

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        for drafter in self.drafters.values():
            drafter.observe(request_id, token_ids)

    def finish(self, request_id: int) -> None:
        for drafter in self.drafters.values():
            drafter.finish(request_id)

    def advance_step(self, step: int) -> None:
        for drafter in self.drafters.values():
            drafter.advance_step(step)
