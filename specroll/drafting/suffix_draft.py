"""Turning a match in a `SuffixIndex` into a `Draft`: the one place the draft's shape is decided."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from specroll.drafting.protocol import BaseDrafter, Draft, DraftQuery
from specroll.drafting.suffix_index import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_SHORT_MATCH_DISCOUNT,
    Node,
    Scoring,
    SuffixIndex,
)

RESPONSE_START = -1  # marks where a response begins in group and history indexes; never drafted


@dataclass(frozen=True)
class DraftShape:
    """How a suffix drafter shapes its proposals.

    min_prob:        stop a path once its estimated probability falls below this (0 keeps the budget).
    max_tree_tokens: 0 for linear drafts, unless a query asks for a tree (then as many nodes as its
                     budget); otherwise best-first trees of at most this many tokens, as deep as the
                     query's budget.
    min_match:       shortest matched context (in tokens) a draft may start from.
    short_match_discount: a continuation found after a match of d tokens has its frequency scaled by
                     d / (d + short_match_discount) in the scores (0: frequencies alone). Scores rank
                     drafts from different sources and shape trees; a linear draft keeps its budget
                     whatever its scores unless `min_prob` cuts it.
    """

    min_prob: float = 0.0
    max_tree_tokens: int = 0
    min_match: int = 1
    short_match_discount: float = DEFAULT_SHORT_MATCH_DISCOUNT

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_prob <= 1.0:
            raise ValueError(f"min_prob must lie in [0, 1], got {self.min_prob}")
        if self.max_tree_tokens < 0:
            raise ValueError(f"max_tree_tokens must be >= 0, got {self.max_tree_tokens}")
        if self.min_match < 1:
            raise ValueError(f"min_match must be >= 1, got {self.min_match}")
        if self.short_match_discount < 0:
            raise ValueError(f"short_match_discount must be >= 0, got {self.short_match_discount}")

    @property
    def scoring(self) -> Scoring:
        return Scoring(self.min_prob, self.short_match_discount)

    @property
    def is_tree(self) -> bool:
        return self.max_tree_tokens > 0


def draft_from_match(index: SuffixIndex, node: Node | None, query: DraftQuery, shape: DraftShape) -> Draft:
    """Draft up to the query's budget deep after the context whose longest indexed suffix is `node`:
    a tree where the shape or the query asks for one."""
    request_id, budget = query.request_id, query.budget
    start = None if node is None else index.continuation_point(node, shape.min_match)
    if start is None:
        return Draft(request_id, scores=[])
    if shape.is_tree or query.tree:
        tree = index.propose_tree(start, budget, shape.max_tree_tokens or budget, shape.scoring)
        return Draft(request_id, tree.token_ids, tree.parents, tree.scores)
    chain = index.propose(start, budget, shape.scoring)
    return Draft(request_id, chain.token_ids, None, chain.scores)


def expected_accepted(draft: Draft) -> float:
    """The draft's estimated number of accepted tokens: the sum of its path probabilities."""
    return sum(draft.scores) if draft.scores else 0.0


class SuffixDrafter(BaseDrafter):
    """A drafter over suffix indexes: each query drafted on its own from its request's match
    (`_propose_one`, then `draft_from_match`), chains or, when a query asks, best-first trees."""

    drafts_trees = True

    def __init__(self, shape: DraftShape = DraftShape(), max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self.shape = shape
        self.max_depth = max_depth  # the longest context an index matches

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        return [self._propose_one(q) for q in queries]

    def _propose_one(self, query: DraftQuery) -> Draft:
        raise NotImplementedError
