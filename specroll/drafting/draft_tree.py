"""Trees of drafts: growing one best-first, cutting it to a budget of nodes (EAGLE-2's reranking), and
the path of it that exact verification keeps (`accepted_path`).

Two types hold a tree. `GrownTree` is a drafter's tree while it grows: every node grown, in growing
order, with the path scores that decide what is grown and kept; the draft head grows one depth by
depth and cuts it (`grow_depth`, `GrownTree.best`), the suffix index grows one best-first
(`SuffixIndex.propose_tree`). `Draft` (`protocol`) is what a drafter hands the engine: one request's
proposal, a chain or a tree already within its budget, with what it carries besides (q for rejection
mode, which drafter proposed it). They stay two: growth's bookkeeping (adding, ranking, the frontier)
has no place in the engine's contract, and a draft carries what no growing tree has.

`accepted_path` is exact verification of a tree, written once for a verification forward (the
engine's verifier) and for a replayed response (`Draft.kept_in_exact_mode`); torch-free, here where
both reach it.

A drafter with a distribution proposes, at every node, its `width` best candidates for the next
token, each scored in [0, 1]; a node's score is the product of the scores along its path, an estimate
of how likely the target's own samples follow that path. Each depth expands only the `beam` best new
nodes of a request, and at the end the `budget` best nodes of all it grew are kept. Scores never rise
along a path, so the kept nodes include every kept node's parent. Imports no torch: the drafter
finds each expanded node's candidates (a batched step of its model per depth), this file grows the
trees from them.

This is not the suffix index's best-first growth (`SuffixIndex.propose_tree`), though both keep the
best-scored nodes: there a node's children cost a dictionary read, so the single best extension is
added at a time (a heap over every node's children, output in score order, of exactly the best
`max_nodes`); here they cost a model step, so growth goes a whole depth at a time for every request at
once, expanding only the `beam` best new nodes, and the best `budget` of all grown are kept in growing
order. Run one through the other and either the head steps once per node instead of once per depth, or
the suffix drafter's trees change (their order, and their nodes where the beam would cut).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, TypeVar


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
    context), path score (an estimate of how likely the target's own tokens follow the path)."""

    token_ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def add(self, token: int, parent: int, score: float) -> int:
        self.token_ids.append(token)
        self.parents.append(parent)
        self.scores.append(score)
        return len(self.token_ids) - 1

    def best(self, budget: int) -> tuple[list[int], list[int], list[float]]:
        """The `budget` best-scored nodes (ties: the earlier grown), in growing order, their parents
        renumbered: (tokens, parents, scores). Nodes of score 0 are never kept."""
        ranked = sorted((i for i, s in enumerate(self.scores) if s > 0), key=lambda i: -self.scores[i])
        kept = sorted(ranked[:budget])
        index = {-1: -1, **{old: new for new, old in enumerate(kept)}}
        if any(self.parents[i] not in index for i in kept):
            raise AssertionError("a kept node's parent was cut: scores rose along a path")
        return (
            [self.token_ids[i] for i in kept],
            [index[self.parents[i]] for i in kept],
            [self.scores[i] for i in kept],
        )

    def frontier(self, new: list[int], beam: int) -> list[int]:
        """Of the nodes `new` (just grown), the `beam` best-scored with a score above 0."""
        return sorted((i for i in new if self.scores[i] > 0), key=lambda i: -self.scores[i])[:beam]


class TreeQuery(Protocol):
    """What growth reads of a drafter's query (`DraftQuery`)."""

    request_id: int
    budget: int  # nodes the request's tree may keep


Query = TypeVar("Query", bound=TreeQuery)


def grow_depth(
    trees: dict[int, GrownTree],
    frontier: Sequence[tuple[Query, int]],
    candidates: Sequence[Sequence[int]],
    scores: Sequence[Sequence[float]],
    shape: TreeShape,
    depth: int,
) -> list[tuple[Query, int, int]]:
    """One depth of growth: frontier[i] (query, node; -1 its context) gets candidates[i] (tokens,
    `shape.width` of them, best first) as children, each scored its parent's score times scores[i].
    Returns the nodes to expand at the next depth: (query, child node, its index in the flattened
    candidates), each request's `beam` best, none once a request's tree is as deep as its budget."""
    grown: dict[int, tuple[Query, dict[int, int]]] = {}  # request -> (query, {child node: flat index})
    for i, (q, node) in enumerate(frontier):
        tree = trees[q.request_id]
        base = tree.scores[node] if node >= 0 else 1.0
        children = grown.setdefault(q.request_id, (q, {}))[1]
        for k, (token, score) in enumerate(zip(candidates[i], scores[i])):
            children[tree.add(token, node, base * score)] = i * shape.width + k
    expanded = []
    for q, children in grown.values():
        if depth + 1 < q.budget:  # a tree of `budget` nodes is at most that deep
            best = trees[q.request_id].frontier(list(children), shape.beam)
            expanded += [(q, child, children[child]) for child in best]
    return expanded


def accepted_path(
    token_ids: Sequence[int], parents: Sequence[int], target_after: Callable[[int, int], int | None]
) -> list[int]:
    """Exact verification of one tree of drafts (a chain is a tree): the deepest path whose every token
    is the target's own token after the node before it. Returns the path's nodes, root first (of
    equally deep paths, the one ending first in growing order).

    token_ids[i] has parent parents[i] (-1 = the context; parents first); target_after(node, depth) is
    the target's token after `node` (-1: the context), which lies `depth` tokens past the context, or
    None where it is not known. A verification forward knows it after every node (its logit row there);
    a replayed response after every depth (the response's next token)."""
    depth = {-1: 0}
    best = -1
    for i, (token, parent) in enumerate(zip(token_ids, parents)):
        if parent in depth and token == target_after(parent, depth[parent]):
            depth[i] = depth[parent] + 1
            if depth[i] > depth[best]:
                best = i
    path = []
    while best != -1:
        path.append(best)
        best = parents[best]
    return path[::-1]
