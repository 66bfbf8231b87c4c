"""A depth-limited suffix trie over token sequences, with frequency-scored drafts.

Every substring of length <= `max_depth` of every indexed sequence is a node; a node's `weight` is the
summed weight of its occurrences and its `out` the weight of those followed by another token, so the
probability that token c follows the node's string is  weight(child c) / out(node).

Each node keeps a suffix link to the node of its string minus the first token (always present in a
suffix trie). A sequence's *tail* is the node of its last `max_depth - 1` tokens; the tails of all its
shorter suffixes are that node's suffix-link chain, so appending a token touches `max_depth` nodes:
O(depth) per token. Drafting starts from a match node and follows the most probable child; a path
that reaches `max_depth` continues through its suffix link, so drafts are not cut by the depth limit.
A drafted token's score multiplies the path's continuation frequencies, each scaled by how long a match
it was drawn from, so that scores from indexes of different richness can be compared.

Appending is deferred: `extend` only records the tokens, and the trie catches up, replaying every
recorded extension in arrival order, when it is next read (a match, a draft, a removal). A request
whose index is never queried (the policy drafted nothing for it) so costs a list append per token, and
the trie after catching up is the one eager appending would have built.

Sequences may carry a weight (the history drafter weights recent training steps more); `count` stays
an integer occurrence count so that removal is exact whatever the weights.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Sequence

from specroll.drafting.draft_tree import GrownTree

DEFAULT_MAX_DEPTH = 24
DEFAULT_SHORT_MATCH_DISCOUNT = 2.0


Node = int  # a node's id: an index into the index's per-node arrays
ROOT: Node = 0
_NONE = -1


@dataclass(frozen=True)
class Scoring:
    """How proposals are scored and cut: a continuation found after a match of d tokens has its
    frequency scaled by d / (d + short_match_discount) (0: frequencies alone), and a path stops once
    its probability (the product along it) falls below `min_prob`."""

    min_prob: float = 0.0
    short_match_discount: float = DEFAULT_SHORT_MATCH_DISCOUNT


DEFAULT_SCORING = Scoring()


@dataclass
class LinearProposal:
    """A chain of drafted tokens; scores[i] is the estimated probability that tokens 0..i all match."""

    token_ids: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)


@dataclass
class _LiveSequence:
    token_ids: list[int]  # every token given to `extend`, indexed or not
    tail: Node
    weight: float
    num_indexed: int = 0  # token_ids[:num_indexed] are in the trie
    followed: Node | None = None  # longest suffix of the sequence followed somewhere by a token
    synced_at: int = -1  # the index's version when `followed` was last made exact


class SuffixIndex:
    """Suffix trie of live and finished sequences, keyed by a caller-chosen sequence id.

    Nodes live in parallel arrays indexed by node id rather than as objects: millions of small
    objects would make Python's cycle collector rescan them again and again as the index grows.
    """

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        if max_depth < 2:
            raise ValueError(f"max_depth must be >= 2, got {max_depth}")
        self.max_depth = max_depth
        self.root = ROOT
        self._sequences: dict[Hashable, _LiveSequence] = {}
        self._version = 0  # bumped by every change to the trie
        self._pending: list[list] = []  # [seq id, end]: index the sequence's tokens up to `end`, in order
        self._token: list[int] = [_NONE]
        self._depth: list[int] = [0]
        self._count: list[int] = [0]  # occurrences (exact, drives removal)
        self._weight: list[float] = [0.0]  # summed weight of occurrences
        self._out: list[float] = [0.0]  # summed weight of occurrences followed by a token
        self._children: list[dict[int, Node] | None] = [None]  # token -> child
        self._best: list[Node] = [_NONE]  # heaviest child; _NONE when unknown
        self._link: list[Node] = [_NONE]  # suffix link; _NONE only at the root
        self._free: list[Node] = []

    # ---- sequences ------------------------------------------------------------------------------

    def add(self, seq_id: Hashable, token_ids: Iterable[int] = (), weight: float = 1.0) -> None:
        if seq_id in self._sequences:
            raise ValueError(f"sequence {seq_id!r} is already indexed")
        self._sequences[seq_id] = _LiveSequence([], ROOT, weight)
        self.extend(seq_id, token_ids)

    def extend(self, seq_id: Hashable, token_ids: Iterable[int]) -> None:
        """Record tokens at the end of the sequence; the trie takes them in at its next read."""
        seq = self._sequences[seq_id]
        seq.token_ids.extend(token_ids)
        pending = self._pending
        if pending and pending[-1][0] == seq_id:  # consecutive extensions of one sequence are one
            pending[-1][1] = len(seq.token_ids)
        elif len(seq.token_ids) > seq.num_indexed:
            pending.append([seq_id, len(seq.token_ids)])

    def _catch_up(self) -> None:
        """Index every recorded extension, in the order `extend` was called."""
        sequences = self._sequences
        for seq_id, end in self._pending:
            self._index_tokens(sequences[seq_id], end)
        self._pending.clear()

    def _index_tokens(self, seq: _LiveSequence, end: int) -> None:
        tail, weight, followed = seq.tail, seq.weight, seq.followed
        # Only this sequence changed the trie since `followed` was exact: then the longest followed
        # suffix grows by at most one token per token, and tracking it costs O(1) amortised.
        is_incremental = seq.synced_at == self._version
        children, append = self._children, self._append
        for token in seq.token_ids[seq.num_indexed : end]:
            tail = append(tail, token, weight)
            if is_incremental:
                followed = self._continuation_point(children[ROOT if followed is None else followed][token])
        seq.num_indexed = end
        seq.tail = tail
        seq.followed = followed if is_incremental else self._continuation_point(tail)
        self._version += 1
        seq.synced_at = self._version

    def followed_suffix(self, seq_id: Hashable) -> Node | None:
        """The longest suffix of the sequence that occurs earlier followed by a token (None if none)."""
        if self._pending:
            self._catch_up()
        seq = self._sequences[seq_id]
        if seq.synced_at != self._version:  # other sequences changed the trie since
            seq.followed = self._continuation_point(seq.tail)
            seq.synced_at = self._version
        return seq.followed

    def remove(self, seq_id: Hashable) -> None:
        seq = self._sequences[seq_id]
        if seq.num_indexed == 0:  # never reached the trie: forgetting its recorded tokens is enough
            self._pending = [entry for entry in self._pending if entry[0] != seq_id]
            del self._sequences[seq_id]
            return
        if self._pending:
            self._catch_up()
        del self._sequences[seq_id]
        tail = ROOT
        for token in seq.token_ids:
            tail = self._unappend(tail, token, seq.weight)
        self._version += 1

    def token_ids(self, seq_id: Hashable) -> list[int]:
        """The sequence's tokens (read-only)."""
        return self._sequences[seq_id].token_ids

    def tail(self, seq_id: Hashable) -> Node:
        if self._pending:
            self._catch_up()
        return self._sequences[seq_id].tail

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._sequences

    @property
    def num_sequences(self) -> int:
        return len(self._sequences)

    def num_nodes(self) -> int:
        if self._pending:
            self._catch_up()
        return len(self._token) - len(self._free)

    def depth(self, node: Node) -> int:
        return self._depth[node]

    def children(self, node: Node) -> dict[int, float]:
        """Token -> probability of following `node`'s string."""
        if self._pending:
            self._catch_up()
        kids = self._children[node] or {}
        return {token: self._weight[child] / self._out[node] for token, child in kids.items()}

    def _new_node(self, token: int, depth: int, weight: float) -> Node:
        """A node seen once, with the given weight, and no children yet."""
        if self._free:
            node = self._free.pop()
            self._token[node], self._depth[node] = token, depth
            self._count[node], self._weight[node], self._out[node] = 1, weight, 0.0
            self._children[node], self._best[node], self._link[node] = None, _NONE, _NONE
            return node
        self._token.append(token)
        self._depth.append(depth)
        self._count.append(1)
        self._weight.append(weight)
        self._out.append(0.0)
        self._children.append(None)
        self._best.append(_NONE)
        self._link.append(_NONE)
        return len(self._token) - 1

    def _append(self, tail: Node, token: int, weight: float) -> Node:
        """Extend every suffix ending at `tail` by `token`; return the new tail.

        The suffixes are visited longest first. Once one of them was already followed by `token`, so
        were all shorter ones (their strings occur wherever the longer one does) and their suffix
        links exist, so the rest of the walk only adds weight.
        """
        children, weights, out, best, link = self._children, self._weight, self._out, self._best, self._link
        token_of, depth, count, is_reusing = self._token, self._depth, self._count, bool(self._free)
        node, previous, first = tail, _NONE, _NONE
        while node != _NONE:  # suffixes never followed by `token` before: new nodes
            kids = children[node]
            if kids is None:
                kids = children[node] = {}
            child = kids.get(token)
            if child is not None:
                break
            if is_reusing:
                child = self._new_node(token, depth[node] + 1, weight)
                is_reusing = bool(self._free)
            else:  # `_new_node` inlined: most appends create nodes, and this is the hot loop
                child = len(depth)
                token_of.append(token)
                depth.append(depth[node] + 1)
                count.append(1)
                weights.append(weight)
                out.append(0.0)
                children.append(None)
                best.append(_NONE)
                link.append(_NONE)
            kids[token] = child
            out[node] += weight
            b = best[node]
            if b != _NONE and weight >= weights[b]:
                best[node] = child  # ties go to the most recent continuation
            if previous == _NONE:
                first = child
            else:
                link[previous] = child
            previous = child
            node = link[node]
        else:
            child = ROOT  # the new depth-1 node links to the root
        if previous != _NONE:
            link[previous] = child
        else:
            first = child
        self._add_weight(node, token, weight)
        return first if depth[first] < self.max_depth else link[first]

    def _node_arrays(self) -> tuple[list, list, list, list, list, list]:
        """The per-node arrays a walk up the suffix links reads and writes (bound to locals there:
        it is the hot loop)."""
        return self._children, self._count, self._weight, self._out, self._best, self._link

    def _add_weight(self, node: Node, token: int, weight: float) -> None:
        """Count one more occurrence of `token` after `node` and after each of its suffixes, all of
        which were followed by `token` before."""
        children, count, weights, out, best, link = self._node_arrays()
        while node != _NONE:
            child = children[node][token]
            count[child] += 1
            weights[child] += weight
            out[node] += weight
            b = best[node]
            if b != _NONE and weights[child] >= weights[b]:
                best[node] = child  # ties go to the most recent continuation
            node = link[node]

    def _unappend(self, tail: Node, token: int, weight: float) -> Node:
        """Undo one `_append` of a sequence being replayed from its start."""
        children, count, weights, out, best, link = self._node_arrays()
        node, new_tail = tail, _NONE
        while node != _NONE:
            child = children[node][token]
            count[child] -= 1
            weights[child] -= weight
            out[node] -= weight
            if best[node] == child:
                best[node] = _NONE
            if new_tail == _NONE and self._depth[child] < self.max_depth:
                new_tail = child
            if count[child] == 0:
                # detached; its subtree empties as the replay goes on, so its id is free to reuse
                del children[node][token]
                self._free.append(child)
            node = link[node]
        return new_tail

    # ---- matching -------------------------------------------------------------------------------

    def step(self, node: Node, token: int) -> Node:
        """The longest indexed suffix of (node's string + token), capped below `max_depth`."""
        return self.walk(node, (token,))

    def walk(self, node: Node, token_ids: Iterable[int]) -> Node:
        """`step` once per token: the longest indexed suffix of node's string + token_ids."""
        if self._pending:
            self._catch_up()
        children, link, depth, max_depth = self._children, self._link, self._depth, self.max_depth
        for token in token_ids:
            while True:
                kids = children[node]
                if kids and token in kids:
                    child = kids[token]
                    node = link[child] if depth[child] >= max_depth else child
                    break
                if node == ROOT:
                    break
                node = link[node]
        return node

    def match(self, context: Sequence[int]) -> Node:
        """Longest indexed suffix of `context` (at most `max_depth - 1` tokens)."""
        return self.walk(ROOT, context[max(0, len(context) - self.max_depth) :])

    def continuation_point(self, node: Node, min_depth: int = 1) -> Node | None:
        """The longest suffix of `node`'s string that was followed by some token, or None."""
        if self._pending:
            self._catch_up()
        return self._continuation_point(node, min_depth)

    def _continuation_point(self, node: Node, min_depth: int = 1) -> Node | None:
        children, depth, link = self._children, self._depth, self._link
        while depth[node] >= min_depth:
            if children[node]:
                return node
            node = link[node]
        return None

    # ---- drafting -------------------------------------------------------------------------------

    def _best_child(self, node: Node) -> Node:
        best = self._best[node]
        if best == _NONE and self._children[node]:
            weights = self._weight
            for child in self._children[node].values():  # insertion order: ties go to the most recent
                if best == _NONE or weights[child] >= weights[best]:
                    best = child
            self._best[node] = best
        return best

    def _match_confidence(self, node: Node, discount: float) -> float:
        """How far a continuation of `node` is trusted for its match length d: d / (d + discount).

        A continuation seen after one matching token says little; after twenty, nearly all it can.
        """
        depth = self._depth[node]
        return depth / (depth + discount)

    def propose(self, node: Node, max_tokens: int, scoring: Scoring = DEFAULT_SCORING) -> LinearProposal:
        """Greedy chain after `node`: each token is the most frequent continuation of the longest
        suffix of the context plus the tokens drafted so far.

        A token's score is its path probability: the product of the continuation frequencies along
        the path, each discounted by the match length it was drawn from (`_match_confidence`).
        """
        if self._pending:
            self._catch_up()
        proposal = LinearProposal()
        tokens, scores = proposal.token_ids, proposal.scores
        weights, out, token_of = self._weight, self._out, self._token
        prob = 1.0
        while len(tokens) < max_tokens:
            node = self._continuation_point(node)
            if node is None:
                break
            child = self._best_child(node)
            prob *= weights[child] / out[node] * self._match_confidence(node, scoring.short_match_discount)
            if prob < scoring.min_prob:
                break
            tokens.append(token_of[child])
            scores.append(prob)
            node = child
        return proposal

    def propose_tree(
        self, node: Node, max_depth: int, max_nodes: int, scoring: Scoring = DEFAULT_SCORING
    ) -> GrownTree:
        """Best-first tree from `node` (parent -1 is the match point): repeatedly add the most probable
        path extension.

        Path probabilities only shrink along a path, so parents are always added before children.
        """
        if self._pending:
            self._catch_up()
        tree = GrownTree()
        order = itertools.count()  # heap tie-breaker: earlier pushes first
        frontier: list[tuple[float, int, int, int, Node]] = []  # (-prob, order, parent, depth, node)
        push = functools.partial(self._push_children, frontier, order, discount=scoring.short_match_discount)
        push(node, 1.0, -1, 1)
        while frontier and len(tree.token_ids) < max_nodes:
            neg_prob, _, parent, depth, child = heapq.heappop(frontier)
            if -neg_prob < scoring.min_prob:
                break
            index = tree.add(self._token[child], parent, -neg_prob)
            if depth < max_depth:
                push(child, -neg_prob, index, depth + 1)
        return tree

    def _push_children(
        self,
        frontier: list,
        order: itertools.count,
        node: Node,
        prob: float,
        index: int,
        depth: int,
        discount: float,
    ) -> None:
        node = self._continuation_point(node)
        if node is None:
            return
        out = self._out[node] / self._match_confidence(node, discount)
        for child in (self._children[node] or {}).values():
            entry = (-prob * self._weight[child] / out, next(order), index, depth, child)
            heapq.heappush(frontier, entry)
