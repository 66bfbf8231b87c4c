"""The draft stage of an engine step: the policy decides each request's draft length (and, for a draft
ladder, which drafter proposes), then the named drafter proposes that many tokens (`DraftBatch`).

Kept apart from the engine so that the step's driver reads schedule -> draft -> verify -> commit ->
observe without the policy's view of the batch spelled out inside it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from specroll.drafting.protocol import Draft, Drafter
from specroll.engine.request import Request
from specroll.engine.step import DraftBatch
from specroll.engine.verifier import build_drafts
from specroll.engine_config import EngineConfig
from specroll.policies.base import BatchView, SpeculationPolicy
from specroll.policies.batch_view_builder import build_batch_view
from specroll.policies.prompt_lengths import PromptLengths


class Proposer:
    """draft(requests, ...) -> DraftBatch: a forward's drafts, a request each in the batch's order."""

    def __init__(
        self, drafter: Drafter | None, policy: SpeculationPolicy, config: EngineConfig, vocab_size: int
    ) -> None:
        self._drafter, self._policy, self._config = drafter, policy, config
        self._vocab_size = vocab_size

    @property
    def allows_trees(self) -> bool:
        """Trees are verified in exact mode (rejection mode verifies chains). With batch-invariant
        numerics each tree node reads its path's keys in chain order (`model.chain_order`), so its
        tokens are plain decoding's to the bit."""
        return self._config.verify == "exact"

    def draft(
        self,
        requests: list[Request],
        num_waiting: int,
        finished_lengths: Sequence[int],
        prompt_lengths: PromptLengths,
    ) -> DraftBatch:
        """The policy decides first (lengths and drafter); then the named drafter proposes. The
        decision handed on names the drafter that did propose (None for a single drafter), so that a
        policy never files one drafter's acceptance under another's name."""
        started = time.perf_counter()
        view = self._batch_view(requests, num_waiting, finished_lengths, prompt_lengths)
        decision = self._policy.decide(view)
        name = self._member_name(decision.drafter)
        used = replace(decision, drafter=name, tree=decision.tree and self._offers_trees(name))
        drafts, upkeep = self._proposed(requests, view.clip(decision.draft_lengths), name, used.tree)
        drafted_at = time.perf_counter()
        return DraftBatch(used, drafts, drafted_at - started, upkeep, drafted_at)

    def _proposed(
        self, requests: list[Request], budgets: list[int], member_name: str | None, tree: bool
    ) -> tuple[list[Draft], float]:
        """Each request's draft within its budget, and the drafter's upkeep; no drafts where nothing
        is to be drafted."""
        if self._drafter is None or not any(budgets):
            return [Draft(r.request_id) for r in requests], 0.0
        member = self._drafter.member(member_name)
        drafts = build_drafts(
            member, requests, budgets, self._vocab_size, allow_trees=self.allows_trees, tree=tree
        )
        return drafts, member.upkeep_seconds()

    def _member_name(self, name: str | None) -> str | None:
        """The member that proposes for a decision naming `name`: only a set of drafters has members."""
        return name if self._drafter is not None and name in self._drafter.member_names else None

    def _offers_trees(self, member: str | None = None) -> bool:
        """Whether a decision may ask the drafter (or its member) for trees."""
        return self.allows_trees and self._drafter is not None and self._drafter.member(member).drafts_trees

    def _batch_view(
        self,
        requests: list[Request],
        num_waiting: int,
        finished_lengths: Sequence[int],
        prompt_lengths: PromptLengths,
    ) -> BatchView:
        """The policy's view of the batch (`build_batch_view`, the simulator's builder too)."""
        return build_batch_view(
            requests,
            self._config.max_draft,
            trees=self._offers_trees(),
            num_waiting=num_waiting,
            finished_lengths=finished_lengths,
            prompt_lengths=prompt_lengths,
        )
