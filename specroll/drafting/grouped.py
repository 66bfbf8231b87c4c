"""Grouped drafting (Seer §4.4): one suffix index per prompt group, fed live by every sibling.

Each request is its own sequence in its group's index, so the tokens it observes extend its own path
(never a sibling's) and its match point is always its exact context; the children found there come from
siblings and from its own earlier output. Finished requests stay in the index for the siblings still
running; a group's index is dropped when the training step advances with no request of it live, or on
`evict`.
"""

from __future__ import annotations

from typing import Sequence

from specroll.drafting.protocol import Draft, DraftQuery, RequestInfo
from specroll.drafting.suffix_draft import RESPONSE_START, DraftShape, SuffixDrafter, draft_from_match
from specroll.drafting.suffix_index import DEFAULT_MAX_DEPTH, SuffixIndex


class GroupedDrafter(SuffixDrafter):
    """Drafts each request from the outputs of all requests of its group, its own included."""

    name = "grouped"

    def __init__(self, shape: DraftShape = DraftShape(), max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        super().__init__(shape, max_depth)
        self._indexes: dict[int, SuffixIndex] = {}  # group id -> index
        self._group_of: dict[int, int] = {}  # live request id -> group id

    def begin(self, info: RequestInfo) -> None:
        index = self._indexes.get(info.group_id)
        if index is None:
            index = self._indexes[info.group_id] = SuffixIndex(self.max_depth)
        index.add(info.request_id, [RESPONSE_START])
        self._group_of[info.request_id] = info.group_id

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self._indexes[self._group_of[request_id]].extend(request_id, token_ids)

    def _propose_one(self, query: DraftQuery) -> Draft:
        index = self._indexes[self._group_of[query.request_id]]
        node = index.followed_suffix(query.request_id)
        return draft_from_match(index, node, query, self.shape)

    def finish(self, request_id: int) -> None:
        del self._group_of[request_id]  # its output stays in the group's index

    def advance_step(self, step: int) -> None:
        live_groups = set(self._group_of.values())
        for group_id in [g for g in self._indexes if g not in live_groups]:
            self.evict(group_id)

    def evict(self, group_id: int) -> None:
        """Forget a group: its index and any of its requests still live."""
        self._indexes.pop(group_id, None)
        for request_id in [r for r, g in self._group_of.items() if g == group_id]:
            del self._group_of[request_id]

    @property
    def num_groups(self) -> int:
        return len(self._indexes)
