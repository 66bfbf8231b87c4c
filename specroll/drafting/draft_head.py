"""The draft-head drafter: chains from a `DraftHead` that continues the target's hidden states.

After every forward the engine hands it the target's hidden state whose logits drew each request's
newest token (`observe_features`); a proposal then steps the head from that state and the newest
token's embedding, draws a token from the head's distribution (`specroll.drafting.draws`: coupled in
exact mode, sampled with q in rejection mode), and steps again from its own prediction, for each
request's budget: one small batched step per depth, no target forward. A request whose state is not
at its current context (new, or resumed elsewhere) gets no draft this forward.

Given a `TreeShape` (exact mode), it drafts trees for the queries that ask for one (`DraftQuery.tree`,
the policy's choice per forward: `on_request`), or for every query: each expanded node's best
candidates (`draws.ranked_candidates`, the coupled draw first) become its children, grown best-first
and cut to the request's budget of nodes (`drafting.draft_tree`); the head steps every expanded
node's branch at once, one batched step per depth.

New head weights are offered from any thread (`offer_weights`, the spot trainer's way in) and swapped
in at the next proposal or the next forward's features, whichever comes first: between two forwards.
"""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from specroll.drafting.draft_tree import GrownTree, TreeShape, grow_depth
from specroll.drafting.draws import check_draw, draw_tokens, ranked_candidates, tempered_probs
from specroll.drafting.protocol import BaseDrafter, Draft, DraftQuery, TargetFeatures, TrainableHead
from specroll.drafting.head_kernels import adopt_packed, packed_offer, use_cpu_kernels
from specroll.drafting.head_model import DraftHead, check_compatible, load_head
from specroll.model.device import fast_bf16
from specroll.sampling_rules import DEFAULT_SAMPLING_RULE


TREE_COST_NODES = 16  # the tree size whose drafting time, per node, prices a tree's nodes


def drafting_dtype(embedding: torch.Tensor) -> torch.dtype:
    """The dtype a head drafts in for a target with these embeddings: bf16 where the target runs in
    fp32 on a device that multiplies bf16 natively (a drafting step at batch 8 on SmolLM2's head,
    AVX512-BF16 CPU, one thread: 6.0 ms against 12.0 ms), else the target's. Drafts change speed only:
    what a head drafts in never changes a token."""
    if embedding.dtype == torch.float32 and fast_bf16(embedding.device):
        return torch.bfloat16
    return embedding.dtype


class DraftHeadDrafter(BaseDrafter):
    name = "draft-head"
    needs_features = True

    def __init__(
        self,
        head: DraftHead,
        embedding: torch.Tensor,
        draw: str = "coupled",
        seed: int = 0,
        rule: str = DEFAULT_SAMPLING_RULE,
        with_scores: bool = False,
        where: str = "",
        tree: TreeShape | None = None,
        master: DraftHead | None = None,
        on_request: bool = False,
    ) -> None:
        check_draw(draw)
        if tree is not None and draw == "sample":
            raise ValueError("a draft head drafts trees in exact mode only (argmax or coupled draws)")
        self.tree = tree
        self.on_request = on_request  # trees for the queries that ask (`DraftQuery.tree`) only
        check_compatible(head, embedding.shape[1], embedding.shape[0], where)
        self.rule = rule  # exact mode's sampling rule, which a coupled draw follows
        # score drafts (q of each drawn token: one more softmax and read-back a depth) only for a
        # combination of drafters that chooses by score (`head+suffix`)
        self.with_scores = with_scores
        self.head = head.eval()
        use_cpu_kernels(self.head)  # where it drafts in bf16 on a CPU that runs them (`head_kernels`)
        self.dtype = head.lm_head.weight.dtype  # the head's inputs are cast to it
        self.master = master  # the head at full precision where `head` drafts at less, for trainers
        self.embedding = embedding  # (V, H) the target's input embeddings, on its device
        self.draw = draw
        self.seed = seed
        self.states: dict[int, tuple[torch.Tensor, int]] = {}  # request -> (features (F,), context length)
        self.listeners: list[Callable[[TargetFeatures], None]] = []  # `add_listener`
        self.num_swaps = 0
        self.is_held = False  # `hold_drafts`: no drafts until weights are offered
        self._target_to_draft = head.target_to_draft() if with_scores else None
        self._offered: tuple[Mapping[str, torch.Tensor], dict[str, torch.Tensor]] | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_dir(
        cls,
        directory: str | Path,
        embedding: torch.Tensor,
        draw: str = "coupled",
        seed: int = 0,
        rule: str = DEFAULT_SAMPLING_RULE,
        with_scores: bool = False,
        tree: TreeShape | None = None,
        on_request: bool = False,
    ) -> "DraftHeadDrafter":
        loaded = load_head(directory, embedding.device)
        dtype = drafting_dtype(embedding)
        head = copy.deepcopy(loaded).to(dtype) if dtype != torch.float32 else loaded
        master = loaded if head is not loaded else None
        return cls(
            head,
            embedding,
            draw,
            seed,
            rule,
            with_scores,
            where=str(directory),
            tree=tree,
            master=master,
            on_request=on_request,
        )

    def trainable_head(self) -> TrainableHead:
        """Itself: it holds the head, takes offered weights and tells listeners its features."""
        return self

    @property
    def train_depth(self) -> int:
        """Draft steps a training window unrolls: as deep as the head's warm start did."""
        return self.head.config.train_depth

    def add_listener(self, listener: Callable[[TargetFeatures], None]) -> None:
        """Call `listener` with every TargetFeatures (an online trainer's recorder)."""
        self.listeners.append(listener)

    def trainable_copy(self) -> DraftHead:
        """A float32 copy of the head for a trainer, from full-precision weights where the head
        drafts at less (not from its rounded copy)."""
        return copy.deepcopy(self.master if self.master is not None else self.head).float()

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target's decoder layers whose outputs the head reads beside its final hidden state."""
        return self.head.config.feature_layers

    def observe_features(self, features: TargetFeatures) -> None:
        # offered weights are taken in between two forwards whether or not drafts are asked for: a
        # policy that asks none of a held head (`hold_drafts`) would otherwise never see it trained
        self._swap_offered()
        last = features.hidden.index_select(
            0, torch.tensor(features.last_rows(), device=features.hidden.device)
        )  # (B, H)
        for request_id, row, length in zip(features.request_ids, last, features.context_lengths):
            self.states[request_id] = (row, length)
        for listener in self.listeners:
            listener(features)

    def finish(self, request_id: int) -> None:
        self.states.pop(request_id, None)

    def hold_drafts(self) -> None:
        """Draft nothing until weights are offered: a head not yet trained (`head.born_online`) would
        propose tokens the target rejects, each widening a verification for nothing."""
        self.is_held = True

    def offer_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """New head weights, taken in at the next proposal (the latest offer wins); packed here for
        the CPU kernels, if the head runs them, so that the rollout's thread only copies them in."""
        offer = (weights, packed_offer(self.head, weights))
        with self._lock:
            self._offered = offer

    @torch.no_grad()
    def _swap_offered(self) -> None:
        with self._lock:
            offered, self._offered = self._offered, None
        if offered is not None:
            weights, packed = offered
            self.head.load_state_dict(weights)  # copies into the same parameter tensors
            adopt_packed(self.head, packed)
            self.num_swaps += 1
            self.is_held = False

    @property
    def drafts_trees(self) -> bool:
        return self.tree is not None

    @torch.no_grad()
    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        self._swap_offered()
        if self.is_held:
            return [Draft(q.request_id, source=self.name) for q in queries]
        ready = [q for q in queries if self._is_current(q)]
        trees = [q for q in ready if self._drafts_tree(q)]
        if not trees:
            return self._propose_chains(queries, ready)
        if len(trees) == len(ready):
            return self._propose_trees(queries, ready)
        chains = [q for q in ready if not self._drafts_tree(q)]
        drafts = {d.request_id: d for d in self._propose_trees(trees, trees)}
        drafts.update((d.request_id, d) for d in self._propose_chains(chains, chains))
        return [drafts.get(q.request_id) or Draft(q.request_id, source=self.name) for q in queries]

    def _drafts_tree(self, query: DraftQuery) -> bool:
        return self.tree is not None and (query.tree or not self.on_request)

    def _propose_chains(self, queries: Sequence[DraftQuery], ready: list[DraftQuery]) -> list[Draft]:
        tokens: dict[int, list[int]] = {q.request_id: [] for q in queries}
        probs: dict[int, list] = {q.request_id: [] for q in queries}
        scores: dict[int, list[float]] = {q.request_id: [] for q in queries}  # path probabilities
        active = sorted(ready, key=lambda q: -q.budget)  # each depth steps a prefix of these rows
        if active:
            feature = self._first_feature(active)
            last = torch.tensor([q.context[-1] for q in active], device=feature.device)
            for depth in range(active[0].budget):
                active = [q for q in active if q.budget > depth]
                feature = self.head.step(feature[: len(active)], self._embed(last[: len(active)]))
                logits = self.head.logits(feature).float()  # (b, Vd)
                drawn, dists = draw_tokens(
                    self.draw,
                    logits,
                    active,
                    depth,
                    self.seed,
                    self.head.draft_to_target,
                    self.head.config.vocab_size,
                    self.rule,
                )
                for q, token, dist in zip(active, drawn, dists):
                    tokens[q.request_id].append(token)
                    probs[q.request_id].append(dist)
                if self.with_scores:
                    for q, c in zip(active, self._confidence(logits, active, drawn)):
                        path = scores[q.request_id]
                        path.append(c * (path[-1] if path else 1.0))
                last = torch.tensor(drawn, device=feature.device)
        return [
            self._draft(q.request_id, tokens[q.request_id], probs[q.request_id], scores[q.request_id])
            for q in queries
        ]

    def _propose_trees(self, queries: Sequence[DraftQuery], ready: list[DraftQuery]) -> list[Draft]:
        """Best-first trees (module docstring). `frontier[i]` is (query, node) of the node whose
        feature is row i, a request's context (node -1) at the first depth."""
        trees = {q.request_id: GrownTree() for q in queries}
        if ready:
            width = self.tree.width
            feature = self._first_feature(ready)
            last = torch.tensor([q.context[-1] for q in ready], device=feature.device)
            frontier = [(q, -1) for q in ready]
            for depth in range(min(self.tree.depth, max(q.budget for q in ready))):
                feature = self.head.step(feature, self._embed(last))
                candidates, scores = ranked_candidates(
                    self.draw,
                    self.head.logits(feature).float(),
                    [q for q, _ in frontier],
                    depth,
                    self.seed,
                    width,
                    self.head.draft_to_target,
                    self.rule,
                )
                expanded = grow_depth(trees, frontier, candidates.tolist(), scores.tolist(), self.tree, depth)
                if not expanded:
                    break
                picked = torch.tensor([flat for _, _, flat in expanded], device=feature.device)
                feature = feature.index_select(0, picked // width)  # each child steps from its parent
                last = candidates.reshape(-1)[picked]
                frontier = [(q, child) for q, child, _ in expanded]
        return [self._tree_draft(q, trees[q.request_id]) for q in queries]

    def _tree_draft(self, query: DraftQuery, tree: GrownTree) -> Draft:
        tokens, parents, scores = tree.best(query.budget)
        if not tokens:
            return Draft(query.request_id, source=self.name)
        return Draft(query.request_id, tokens, parents=parents, scores=scores, source=self.name)

    @torch.no_grad()
    def draft_cost(self, batch_sizes: tuple[int, int] = (1, 32)) -> tuple[float, float]:
        """(intercept, slope) of seconds per draft token against batch size on this machine now, for
        the speculation policy's cost model: one head step, its logits and a draw, timed (best of 3)
        at two batch sizes; for a head that always drafts trees, a whole tree of `TREE_COST_NODES`
        nodes a request over its nodes (a tree's steps run over several rows a request, and fewer
        steps than nodes). Measured where the engine is built, in well under a second."""
        always_trees = self.tree is not None and not self.on_request
        seconds = self._tree_node_seconds if always_trees else self._step_seconds
        small, large = (seconds(b) for b in batch_sizes)
        slope = max((large - small) / (batch_sizes[1] - batch_sizes[0]), 0.0)
        return max(small - slope * batch_sizes[0], 0.0), slope

    def _step_seconds(self, batch_size: int) -> float:
        F = self.head.feature_width
        features = torch.ones(batch_size, F, dtype=self.embedding.dtype, device=self.embedding.device)
        tokens = torch.zeros(batch_size, dtype=torch.long, device=self.embedding.device)
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            # the first feature is computed once a draft; counted in each step, an upper bound
            feature = self.head.first_feature(features.to(self.dtype))
            logits = self.head.logits(self.head.step(feature, self._embed(tokens))).float()
            torch.softmax(logits, -1).cumsum(-1)[:, -1].tolist()  # the draw's work, and a sync
            best = min(best, time.perf_counter() - started)
        return best

    def _tree_node_seconds(self, batch_size: int) -> float:
        """A tree proposal of TREE_COST_NODES nodes for each of `batch_size` requests, per node."""
        ids = range(-batch_size, 0)  # engine request ids are >= 0: these never meet a real one
        queries = [DraftQuery(i, 0, [0] * 4, 2, TREE_COST_NODES) for i in ids]
        state = torch.ones(self.head.feature_width, dtype=self.embedding.dtype, device=self.embedding.device)
        best = float("inf")
        for _ in range(3):
            self.states.update({i: (state, 4) for i in ids})
            started = time.perf_counter()
            self._propose_trees(queries, queries)
            best = min(best, time.perf_counter() - started)
        for i in ids:
            self.states.pop(i, None)
        return best / TREE_COST_NODES

    def _first_feature(self, queries: Sequence[DraftQuery]) -> torch.Tensor:
        states = torch.stack([self.states[q.request_id][0] for q in queries])
        return self.head.first_feature(states.to(self.dtype))

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """The target's embeddings of `tokens`, in the head's dtype (the table stays the target's:
        an online trainer reads it live)."""
        return self.embedding[tokens].to(self.dtype)

    def _is_current(self, query: DraftQuery) -> bool:
        state = self.states.get(query.request_id)
        return state is not None and state[1] == len(query.context)

    def _confidence(
        self, logits: torch.Tensor, queries: Sequence[DraftQuery], drawn: list[int]
    ) -> list[float]:
        """q of each drawn token at its request's temperature: a draft's score, for a combination of
        drafters to weigh it against others (`CombinedDrafter`)."""
        index = self._target_to_draft[torch.tensor(drawn, device=logits.device)]
        return tempered_probs(logits, queries).gather(1, index[:, None]).squeeze(1).tolist()

    def _draft(self, request_id: int, tokens: list[int], probs: list, scores: list[float]) -> Draft:
        stacked = torch.stack(probs) if probs and probs[0] is not None else None
        return Draft(request_id, tokens, scores=scores or None, probs=stacked, source=self.name)
