"""A depth-limited suffix trie over token sequences, with frequency-scored drafts.

Every substring of length <= `max_depth` of every indexed sequence is a node; a node's `weight` is the
summed weight of its occurrences and its `out` the weight of those followed by another token, so the
probability that token c follows the node's string is  weight(child c) / out(node).

Each node keeps a suffix link to the node of its string minus the first token (always present in a
suffix trie). A sequence's *tail* is the node of its last `max_depth - 1` tokens; the tails of all its
shorter suffixes are that node's suffix-link chain, so appending a token touches `max_depth` nodes:
O(depth) per token. Drafting starts from a match node and follows the most probable child; a path
that reaches `max_depth` continues through its suffix link, so drafts are not cut by the depth limit.

Sequences may carry a weight (the history drafter weights recent training steps more); `count` stays
an integer occurrence count so that removal is exact whatever the weights.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Sequence

DEFAULT_MAX_DEPTH = 48


class Node:
    """One substring: its last token, its length, its statistics and its edges."""

    __slots__ = ("token", "depth", "count", "weight", "out", "children", "best", "link")

    def __init__(self, token: int, depth: int) -> None:
        self.token = token
        self.depth = depth
        self.count = 0  # occurrences (exact, drives removal)
        self.weight = 0.0  # summed weight of occurrences
        self.out = 0.0  # summed weight of occurrences followed by a token
        self.children: dict[int, Node] = {}
        self.best: Node | None = None  # heaviest child; None when unknown
        self.link: Node | None = None  # suffix link; None only at the root

    def best_child(self) -> Node | None:
        best = self.best
        if best is None:
            for child in self.children.values():  # insertion order: ties go to the most recent
                if best is None or child.weight >= best.weight:
                    best = child
            self.best = best
        return best


@dataclass
class LinearProposal:
    """A chain of drafted tokens; scores[i] is the estimated probability that tokens 0..i all match."""

    token_ids: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)


@dataclass
class TreeProposal:
    """Drafted tokens as a tree: parents[i] indexes token i's parent, -1 for the match point."""

    token_ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)


@dataclass
class _LiveSequence:
    token_ids: list[int]
    tail: Node
    weight: float


class SuffixIndex:
    """Suffix trie of live and finished sequences, keyed by a caller-chosen sequence id."""

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        if max_depth < 2:
            raise ValueError(f"max_depth must be >= 2, got {max_depth}")
        self.max_depth = max_depth
        self.root = Node(-1, 0)
        self.num_removals = 0  # lets holders of match nodes know when nodes may have been detached
        self._sequences: dict[Hashable, _LiveSequence] = {}

    # ---- sequences ------------------------------------------------------------------------------

    def add(self, seq_id: Hashable, token_ids: Iterable[int] = (), weight: float = 1.0) -> None:
        if seq_id in self._sequences:
            raise ValueError(f"sequence {seq_id!r} is already indexed")
        self._sequences[seq_id] = _LiveSequence([], self.root, weight)
        self.extend(seq_id, token_ids)

    def extend(self, seq_id: Hashable, token_ids: Iterable[int]) -> None:
        seq = self._sequences[seq_id]
        tail, weight = seq.tail, seq.weight
        for token in token_ids:
            tail = self._append(tail, token, weight)
            seq.token_ids.append(token)
        seq.tail = tail

    def remove(self, seq_id: Hashable) -> None:
        seq = self._sequences.pop(seq_id)
        tail = self.root
        for token in seq.token_ids:
            tail = self._unappend(tail, token, seq.weight)
        self.num_removals += 1

    def tail(self, seq_id: Hashable) -> Node:
        return self._sequences[seq_id].tail

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._sequences

    @property
    def num_sequences(self) -> int:
        return len(self._sequences)

    def num_nodes(self) -> int:
        stack, total = [self.root], 0
        while stack:
            node = stack.pop()
            total += 1
            stack.extend(node.children.values())
        return total

    def _append(self, tail: Node, token: int, weight: float) -> Node:
        """Extend every suffix ending at `tail` by `token`; return the new tail."""
        max_depth = self.max_depth
        node: Node | None = tail
        previous: Node | None = None
        new_tail: Node | None = None
        while node is not None:
            child = node.children.get(token)
            if child is None:
                child = Node(token, node.depth + 1)
                node.children[token] = child
            child.count += 1
            child.weight += weight
            node.out += weight
            best = node.best
            if best is not None and child.weight >= best.weight:
                node.best = child  # ties go to the most recent continuation
            if previous is not None and previous.link is None:
                previous.link = child
            if new_tail is None and child.depth < max_depth:
                new_tail = child
            previous = child
            node = node.link
        previous.link = self.root  # the depth-1 node
        return new_tail

    def _unappend(self, tail: Node, token: int, weight: float) -> Node:
        """Undo one `_append` of a sequence being replayed from its start."""
        node: Node | None = tail
        new_tail: Node | None = None
        while node is not None:
            child = node.children[token]
            child.count -= 1
            child.weight -= weight
            node.out -= weight
            if node.best is child:
                node.best = None
            if child.count == 0:
                del node.children[token]  # detached; its subtree empties as the replay goes on
            if new_tail is None and child.depth < self.max_depth:
                new_tail = child
            node = node.link
        return new_tail

    # ---- matching -------------------------------------------------------------------------------

    def step(self, node: Node, token: int) -> Node:
        """The longest indexed suffix of (node's string + token), capped below `max_depth`."""
        while token not in node.children and node.link is not None:
            node = node.link
        child = node.children.get(token)
        if child is None:
            return self.root
        return child.link if child.depth >= self.max_depth else child

    def match(self, context: Sequence[int]) -> Node:
        """Longest indexed suffix of `context` (at most `max_depth - 1` tokens)."""
        node = self.root
        for token in context[max(0, len(context) - self.max_depth) :]:
            node = self.step(node, token)
        return node

    def continuation_point(self, node: Node, min_depth: int = 1) -> Node | None:
        """The longest suffix of `node`'s string that was followed by some token, or None."""
        while node.depth >= min_depth:
            if node.children:
                return node
            node = node.link
        return None

    # ---- drafting -------------------------------------------------------------------------------

    def _expandable(self, node: Node) -> Node:
        # a node at the depth limit has no children; its suffix continues where it left off
        return node.link if node.depth >= self.max_depth else node

    def propose(self, node: Node, max_tokens: int, min_prob: float = 0.0) -> LinearProposal:
        """Greedy chain from `node`: the most frequent continuation at each step."""
        proposal = LinearProposal()
        prob = 1.0
        while len(proposal.token_ids) < max_tokens:
            node = self._expandable(node)
            child = node.best_child()
            if child is None:
                break
            prob *= child.weight / node.out
            if prob < min_prob:
                break
            proposal.token_ids.append(child.token)
            proposal.scores.append(prob)
            node = child
        return proposal

    def propose_tree(
        self, node: Node, max_depth: int, max_nodes: int, min_prob: float = 0.0
    ) -> TreeProposal:
        """Best-first tree from `node`: repeatedly add the most probable path extension.

        Path probabilities only shrink along a path, so parents are always added before children.
        """
        proposal = TreeProposal()
        order = itertools.count()  # heap tie-breaker: earlier pushes first
        frontier: list[tuple[float, int, int, int, Node]] = []  # (-prob, order, parent, depth, node)
        self._push_children(frontier, order, node, 1.0, -1, 1)
        while frontier and len(proposal.token_ids) < max_nodes:
            neg_prob, _, parent, depth, child = heapq.heappop(frontier)
            if -neg_prob < min_prob:
                break
            index = len(proposal.token_ids)
            proposal.token_ids.append(child.token)
            proposal.parents.append(parent)
            proposal.scores.append(-neg_prob)
            if depth < max_depth:
                self._push_children(frontier, order, child, -neg_prob, index, depth + 1)
        return proposal

    def _push_children(
        self, frontier: list, order: itertools.count, node: Node, prob: float, index: int, depth: int
    ) -> None:
        node = self._expandable(node)
        for child in node.children.values():
            entry = (-prob * child.weight / node.out, next(order), index, depth, child)
            heapq.heappush(frontier, entry)
