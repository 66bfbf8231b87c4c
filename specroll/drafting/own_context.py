"""Drafting from the request's own context: its prompt and its output so far (SuffixDecoding's local tree)."""

from __future__ import annotations

from typing import Sequence

from specroll.drafting.protocol import BaseDrafter, Draft, DraftQuery, RequestInfo
from specroll.drafting.suffix_draft import DraftShape, draft_from_match
from specroll.drafting.suffix_index import DEFAULT_MAX_DEPTH, SuffixIndex

_SEQUENCE = 0  # each request's index holds one sequence


class OwnContextDrafter(BaseDrafter):
    """One suffix index per live request, over prompt + output; dropped when the request finishes."""

    name = "own_context"
    drafts_trees = True  # best-first trees from the suffix index, when a query asks

    def __init__(self, shape: DraftShape = DraftShape(), max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self.shape = shape
        self.max_depth = max_depth
        self._indexes: dict[int, SuffixIndex] = {}

    def begin(self, info: RequestInfo) -> None:
        index = SuffixIndex(self.max_depth)
        index.add(_SEQUENCE, info.prompt_token_ids)
        self._indexes[info.request_id] = index

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self._indexes[request_id].extend(_SEQUENCE, token_ids)

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        return [self._propose_one(q) for q in queries]

    def _propose_one(self, query: DraftQuery) -> Draft:
        index = self._indexes[query.request_id]
        return draft_from_match(index, index.followed_suffix(_SEQUENCE), query, self.shape)

    def finish(self, request_id: int) -> None:
        del self._indexes[request_id]
