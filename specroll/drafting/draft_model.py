"""A draft model: a small LM with the target's tokenizer, run by the same model runner.

Each proposal runs up to k autoregressive draft forwards for the whole batch at once. The drafter
keeps its own KV cache; after verification the cache is rolled back to the longest prefix it shares
with the committed context, so rejected drafts cost nothing to undo. Before drafting, the queried
requests' cache rows are moved to consecutive slots, longest budget first, so that every draft
forward (a prefix of those rows) reads the cache as a view rather than gathering a copy of it.

While the policy does not draft, the drafter feeds nothing: a request's context is caught up when it
is next drafted for. That catch-up (the prompt of a request new to the drafter, the tokens of the
steps without drafts) runs as a forward of its own before the first draft token's, and its time is
reported apart (`upkeep_seconds`): it is paid once, not by every drafting forward, and a policy that
priced drafting from it would stop drafting where drafting pays.

How a draft token is drawn from the draft model's logits: `specroll.drafting.draws` (argmax is
exact verification's default: on the bundled pair coupled drafting accepts alike and costs more,
BENCHMARKS.md).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import torch

from specroll.drafting.protocol import BaseDrafter, Draft, DraftQuery, RequestInfo
from specroll.model.attention_chunks import plan_chunks
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.drafting.draws import DRAWS, check_draw, draw_tokens
from specroll.sampling_rules import DEFAULT_SAMPLING_RULE

__all__ = ["DRAWS", "DraftModelDrafter"]


class DraftModelDrafter(BaseDrafter):
    name = "draft-model"

    def __init__(
        self,
        runner: ModelRunner,
        draw: str = "argmax",
        seed: int = 0,
        min_split_saving: int = 1024,
        rule: str = DEFAULT_SAMPLING_RULE,
    ) -> None:
        check_draw(draw)
        self.runner = runner
        self.min_split_saving = min_split_saving  # padded tokens a catch-up must save to be split
        self.draw = draw
        self.seed = seed
        self.rule = rule  # exact mode's sampling rule, which a coupled draw follows
        self.free_slots = list(range(runner.cache.num_slots))
        self.slots: dict[int, int] = {}
        self.cached: dict[int, list[int]] = {}  # tokens whose K/V the draft cache holds, per request
        self.known: dict[int, int] = {}  # leading cached tokens known to be committed context
        self._upkeep_seconds = 0.0  # the last proposal's catch-up

    @classmethod
    def from_pretrained(
        cls,
        model_dir: Path,
        max_batch_size: int,
        capacity: int,
        draw: str = "argmax",
        seed: int = 0,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        rule: str = DEFAULT_SAMPLING_RULE,
    ) -> "DraftModelDrafter":
        # one attention chunk: a draft model's attention is too small for a cut to repay its extra call
        # (1-layer bundled draft at batch 32: 2.2 ms a forward unchunked, 2.3-2.4 ms in 2-4 chunks)
        runner = ModelRunner.from_pretrained(
            model_dir, max_batch_size, capacity, dtype, device, max_attention_chunks=1
        )
        return cls(runner, draw, seed, rule=rule)

    def begin(self, info: RequestInfo) -> None:
        self.cached[info.request_id] = []

    def finish(self, request_id: int) -> None:
        self.cached.pop(request_id, None)
        self.known.pop(request_id, None)
        slot = self.slots.pop(request_id, None)
        if slot is not None:
            self.free_slots.append(slot)

    def upkeep_seconds(self) -> float:
        return self._upkeep_seconds

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        queries = [q for q in queries if self._has_slot(q.request_id)]
        active = sorted(queries, key=lambda q: -q.budget)  # each depth drafts a prefix of these rows
        self._align([q.request_id for q in active])
        self._upkeep_seconds = self._catch_up(active)
        tokens: dict[int, list[int]] = {q.request_id: [] for q in queries}
        probs: dict[int, list[torch.Tensor]] = {q.request_id: [] for q in queries}
        for depth in range(max((q.budget for q in queries), default=0)):
            active = [q for q in active if q.budget > depth]
            if not active:
                break
            feed = [self._pending(q, tokens[q.request_id]) for q in active]
            logits = self._forward(
                [
                    SequenceInput(self.slots[q.request_id], len(self.cached[q.request_id]), f)
                    for q, f in zip(active, feed)
                ]
            )  # (B, V)
            for q, f in zip(active, feed):
                self.cached[q.request_id] += f
                if depth == 0:  # the whole context is cached now, and committed tokens never change
                    self.known[q.request_id] = len(q.context)
            for q, token, dist in zip(active, *self._choose(active, logits, depth)):
                tokens[q.request_id].append(token)
                probs[q.request_id].append(dist)
        return [
            self._draft(q.request_id, tokens.get(q.request_id, []), probs.get(q.request_id, []))
            for q in queries
        ]

    def _catch_up(self, queries: Sequence[DraftQuery]) -> float:
        """Feed each query's context beyond what a drafting forward feeds (its budget + 1 newest
        tokens) in forwards of their own; returns their seconds."""
        behind = []
        for q in queries:  # `known` tokens are cached for sure: only a query past them by more may lag
            if len(q.context) - self.known.get(q.request_id, 0) <= q.budget + 1:
                continue
            pending = self._pending(q, [])
            if len(pending) > q.budget + 1:
                behind.append((q, pending[: -(q.budget + 1)]))
        if not behind:
            return 0.0
        started = time.perf_counter()
        self._forward(
            [SequenceInput(self.slots[q.request_id], len(self.cached[q.request_id]), f) for q, f in behind]
        )
        for q, fed in behind:
            self.cached[q.request_id] += fed
        return time.perf_counter() - started

    def _forward(self, inputs: list[SequenceInput]) -> torch.Tensor:
        """Last-token logits (B, V). A catch-up (requests new to the drafter, or back after steps
        without drafts) feeds rows of very different lengths: it runs in forwards of similar lengths,
        as the engine's prefill does, rather than padding every row to the longest."""
        order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i].token_ids))
        chunks = plan_chunks(
            [len(inputs[i].token_ids) for i in order], max_chunks=4, min_saving=self.min_split_saving
        )
        if len(chunks) == 1:
            return self.runner.forward(inputs).logits[:, 0]
        logits = None
        for chunk in chunks:
            rows = order[chunk.first : chunk.end]
            part = self.runner.forward([inputs[i] for i in rows]).logits[:, 0]
            logits = part.new_empty(len(inputs), part.shape[-1]) if logits is None else logits
            logits[rows] = part
        return logits

    def _has_slot(self, request_id: int) -> bool:
        if request_id not in self.slots and self.free_slots:
            self.slots[request_id] = self.free_slots.pop(0)
            self.cached.setdefault(request_id, [])
        return request_id in self.slots

    def _align(self, request_ids: list[int]) -> None:
        """Move the rows of `request_ids` to slots 0..n-1 in that order; other requests keep their
        slot if it is >= n, else take a free one."""
        order = {rid: i for i, rid in enumerate(request_ids)}
        if all(self.slots[rid] == i for rid, i in order.items()):
            return
        kept = {self.slots[rid] for rid in self.slots if rid not in order and self.slots[rid] >= len(order)}
        spare = iter(sorted(set(range(len(order), self.runner.cache.num_slots)) - kept))
        target = {rid: order.get(rid, s if s >= len(order) else None) for rid, s in self.slots.items()}
        target = {rid: next(spare) if t is None else t for rid, t in target.items()}
        moved = [rid for rid in target if target[rid] != self.slots[rid]]
        self.runner.cache.move_slots(
            [self.slots[rid] for rid in moved],
            [target[rid] for rid in moved],
            max((len(self.cached[rid]) for rid in moved), default=0),
        )
        self.slots = target
        self.free_slots = sorted(set(range(self.runner.cache.num_slots)) - set(target.values()))

    def _pending(self, query: DraftQuery, drafted: list[int]) -> list[int]:
        """Tokens to feed: the context (and drafts so far) beyond the longest prefix already cached."""
        sequence = [*query.context, *drafted]
        cached = self.cached[query.request_id]
        limit = min(len(cached), len(sequence) - 1)  # feed at least the newest token
        shared = min(self.known.get(query.request_id, 0), limit)  # compare only past the known prefix
        while shared < limit and cached[shared] == sequence[shared]:
            shared += 1
        del cached[shared:]  # roll back: later writes overwrite the stale positions
        return sequence[shared:]

    def _choose(self, queries: Sequence[DraftQuery], logits: torch.Tensor, depth: int):
        return draw_tokens(self.draw, logits, queries, depth, self.seed, rule=self.rule)

    def _draft(self, request_id: int, tokens: list[int], probs: list) -> Draft:
        stacked = torch.stack(probs) if probs and probs[0] is not None else None
        return Draft(request_id, tokens, probs=stacked)
