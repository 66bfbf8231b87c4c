"""Drafting from the request's own context: its prompt and its output so far (SuffixDecoding's local tree)."""

from __future__ import annotations

from typing import Sequence

from specroll.drafting.protocol import Draft, DraftQuery, RequestInfo
from specroll.drafting.suffix_draft import DraftShape, SuffixDrafter, draft_from_match
from specroll.drafting.suffix_index import DEFAULT_MAX_DEPTH, SuffixIndex

_SEQUENCE = 0  # each request's index holds one sequence


class OwnContextDrafter(SuffixDrafter):
    """One suffix index per live request, over prompt + output; dropped when the request finishes."""

    name = "own_context"

    def __init__(self, shape: DraftShape = DraftShape(), max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        super().__init__(shape, max_depth)
        self._indexes: dict[int, SuffixIndex] = {}

    def begin(self, info: RequestInfo) -> None:
        index = SuffixIndex(self.max_depth)
        index.add(_SEQUENCE, info.prompt_token_ids)
        self._indexes[info.request_id] = index

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self._indexes[request_id].extend(_SEQUENCE, token_ids)

    def _propose_one(self, query: DraftQuery) -> Draft:
        index = self._indexes[query.request_id]
        return draft_from_match(index, index.followed_suffix(_SEQUENCE), query, self.shape)

    def finish(self, request_id: int) -> None:
        del self._indexes[request_id]
