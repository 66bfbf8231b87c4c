"""Growing a tree of drafts best-first, and cutting it to a budget of nodes (EAGLE-2's reranking).

A drafter with a distribution proposes, at every node, its `width` best candidates for the next
token, each scored in [0, 1]; a node's score is the product of the scores along its path, an estimate
of how likely the target's own samples follow that path. Each depth expands only the `beam` best new
nodes of a request, and at the end the `budget` best nodes of all it grew are kept. Scores never rise
along a path, so the kept nodes include every kept node's parent. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TreeShape:
    # the best of 8 shapes replayed on SmolLM2 at 32 nodes, and at 8 and 16 better than (5, 4, 4)
    # (BENCHMARKS.md)
    depth: int = 4  # levels grown below the context (a request's budget may cut it)
    width: int = 8  # candidates drawn at each expanded node
    beam: int = 6  # nodes of a request expanded at each depth

    def __post_init__(self) -> None:
        if min(self.depth, self.width, self.beam) < 1:
            raise ValueError(f"tree depth, width and beam must be >= 1, got {self}")


@dataclass
class GrownTree:
    """One request's nodes in the order grown (parents first): token, parent index (-1 for the
    context), path score."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def add(self, token: int, parent: int, score: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.scores.append(score)
        return len(self.tokens) - 1

    def best(self, budget: int) -> tuple[list[int], list[int], list[float]]:
        """The `budget` best-scored nodes (ties: the earlier grown), in growing order, their parents
        renumbered: (tokens, parents, scores). Nodes of score 0 are never kept."""
        ranked = sorted((i for i, s in enumerate(self.scores) if s > 0), key=lambda i: -self.scores[i])
        kept = sorted(ranked[:budget])
        index = {-1: -1, **{old: new for new, old in enumerate(kept)}}
        if any(self.parents[i] not in index for i in kept):
            raise AssertionError("a kept node's parent was cut: scores rose along a path")
        return (
            [self.tokens[i] for i in kept],
            [index[self.parents[i]] for i in kept],
            [self.scores[i] for i in kept],
        )

    def frontier(self, new: list[int], beam: int) -> list[int]:
        """Of the nodes `new` (just grown), the `beam` best-scored with a score above 0."""
        return sorted((i for i in new if self.scores[i] > 0), key=lambda i: -self.scores[i])[:beam]
