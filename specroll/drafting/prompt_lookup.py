"""Prompt lookup (n-gram) drafting (Saxena 2023; vLLM's `ngram` proposer): find the most recent
earlier occurrence of the context's last n tokens, longest n first, and propose what followed it.

Each request's n-gram table is kept up to date as tokens are committed, so proposing is O(n + k)
instead of a scan of the whole context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from specroll.drafting.protocol import BaseDrafter, Draft, DraftQuery, RequestInfo


@dataclass
class NgramTable:
    """The tokens of one sequence and, per n-gram, the index just after its latest occurrence
    that already has a continuation."""

    min_n: int
    max_n: int
    tokens: list[int] = field(default_factory=list)
    follows: dict[tuple[int, ...], int] = field(default_factory=dict)

    def extend(self, token_ids: Sequence[int]) -> None:
        for token in token_ids:
            self.tokens.append(token)
            end = len(self.tokens) - 1  # the new token continues n-grams ending just before it
            for n in range(self.min_n, self.max_n + 1):
                if end - n >= 0:
                    self.follows[tuple(self.tokens[end - n : end])] = end

    def propose(self, k: int) -> list[int]:
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(self.tokens) < n:
                continue
            start = self.follows.get(tuple(self.tokens[-n:]))
            if start is not None:
                return self.tokens[start : start + k]
        return []


class PromptLookupDrafter(BaseDrafter):
    name = "prompt-lookup"

    def __init__(self, min_n: int = 1, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"prompt lookup needs 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.min_n, self.max_n = min_n, max_n
        self.tables: dict[int, NgramTable] = {}

    def begin(self, info: RequestInfo) -> None:
        table = NgramTable(self.min_n, self.max_n)
        table.extend(info.prompt_token_ids)
        self.tables[info.request_id] = table

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self.tables[request_id].extend(token_ids)

    def finish(self, request_id: int) -> None:
        self.tables.pop(request_id, None)

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        return [Draft(q.request_id, self._table(q).propose(q.budget)) for q in queries]

    def _table(self, query: DraftQuery) -> NgramTable:
        table = self.tables.get(query.request_id)
        if table is None or len(table.tokens) != len(query.context):  # not begun here: rebuild
            table = NgramTable(self.min_n, self.max_n)
            table.extend(query.context)
            self.tables[query.request_id] = table
        return table
