"""The rollout engine: continuous batching with lossless speculative decoding.

One iteration reads like the algorithm: schedule -> (prefill) -> draft -> verify -> commit -> observe.
Requests finish independently, so the running batch shrinks through the long tail; before each
verification forward the policy decides every request's draft length (and, for a draft ladder,
which drafter proposes), and the drafter proposes that many tokens. Commit appends each request's
tokens (`Request.commit`, which alone decides how a request ends), then confirms to the scheduler
what the forward wrote to the cache (`Scheduler.confirm`): a forward that did not complete (it
raised; on a device, its results never came back) confirms nothing, and its tokens are fed again.

Overlap (recorded steps, no drafter, `EngineConfig.overlap`): while the batch is steady
(`Scheduler.is_steady`: nothing to admit, preempt or move), the next decode step is launched before
the current one is read back, its fed token gathered on the device from the current step's emitted
one (`CapturedStep.launch`), so the host's packing, reading back and committing run while the device
computes. Commits stay in order and each row's bits do not depend on the others (batch-invariant
numerics) nor its noise on the schedule, so every kept token and log-probability is the sequential
engine's; a request that stopped in the current step costs one wasted row in the next. Anything that
changes the engine from outside (`load_weights`, `advance_step`, `abort`) drops the launched step
unread: it confirmed nothing, so its tokens are fed again.
"""

from __future__ import annotations

import time

import torch
from dataclasses import replace
from typing import Callable, Iterable, Mapping


from specroll.drafting.protocol import Draft, Drafter, RequestInfo, TargetFeatures
from specroll.engine.captured_step import CapturedStep
from specroll.engine.admission import plan_prefill_forwards
from specroll.engine.step import Committed, DraftBatch, InFlight
from specroll.engine.verifier import VerifyResult, build_drafts, verify_batch
from specroll.engine.verify_inputs import row_parents
from specroll.engine_config import EngineConfig
from specroll.engine.request import Request
from specroll.engine.scheduler import ScheduleDecision, Scheduler, SchedulerConfig
from specroll.engine.shared_prefill import plan_shared_prefill
from specroll.engine.telemetry import Telemetry
from specroll.model.runner import ForwardOutput, ModelRunner, SequenceInput
from specroll.policies.base import BatchView, ForwardStats, RequestView, SpeculationPolicy
from specroll.policies.fixed import NoSpeculation
from specroll.policies.remaining_lengths import FinishedLengths


class Engine:
    def __init__(
        self,
        runner: ModelRunner,
        config: EngineConfig,
        drafter: Drafter | None = None,
        policy: SpeculationPolicy | None = None,
        training_step: int = 0,
    ) -> None:
        self.runner = runner
        self.config = config
        self.drafter = drafter
        if drafter is not None and drafter.needs_features:
            runner.use_feature_layers(tuple(drafter.feature_layers))
        self.policy = policy or NoSpeculation()
        self.training_step = training_step
        self.eos_token_ids = frozenset(runner.config.eos_token_ids)
        self.scheduler = Scheduler(
            SchedulerConfig(
                num_slots=runner.cache.num_slots,
                capacity=runner.cache.capacity,
                kv_budget_tokens=config.kv_budget_tokens or runner.cache.num_slots * runner.cache.capacity,
                max_prefill_tokens=config.max_prefill_tokens,
                reserve_per_request=config.max_draft + 1,
            )
        )
        self.telemetry = Telemetry()
        self.finished_lengths = FinishedLengths()  # for the policy's view of a drain (`BatchView`)
        # with static forwards, a verification step is one recorded graph: forward, head, verification
        self.captured = (
            None
            if runner.static is None
            else CapturedStep(runner, config.seed, config.verify, config.sampling_rule)
        )
        self.overlaps = config.overlap and self.captured is not None and drafter is None
        self._in_flight: InFlight | None = None  # a decode step launched ahead, not yet read back

    # ----- requests

    def add_request(self, request: Request) -> None:
        """Queue a request; a bad one raises ValueError naming the problem and queues nothing."""
        self._validate(request)
        self.scheduler.add(request)
        if self.drafter is not None:
            self.drafter.begin(
                RequestInfo(
                    request.request_id, request.group_id, tuple(request.prompt_token_ids), self.training_step
                )
            )
            if request.output_token_ids:  # resumed elsewhere: the drafter reads what it generated
                self.drafter.observe(request.request_id, list(request.output_token_ids))

    def _validate(self, request: Request) -> None:
        prompt = request.prompt_token_ids
        if not prompt:
            raise ValueError(f"request {request.request_id}: empty prompt")
        vocab = self.runner.config.vocab_size
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise ValueError(
                f"request {request.request_id}: token ids {bad[:5]} outside the vocabulary 0..{vocab - 1}"
            )

    def abort(self, request: Request) -> None:
        """Stop running `request` here and forget it (its tokens stay with it; nothing is emitted)."""
        self._in_flight = None
        self.scheduler.abort(request)
        if self.drafter is not None:
            self.drafter.finish(request.request_id)

    def describe_numerics(self) -> str:
        """The target's precision and kernels, for a run's summary (`ModelRunner.describe_numerics`)."""
        return self.runner.describe_numerics()

    def advance_step(self, step: int) -> None:
        """The RL trainer moved to training step `step`: history drafters roll their window, and a
        policy that estimates acceptance starts afresh (the target has new weights, and an online
        drafter too)."""
        self._in_flight = None
        self.training_step = step
        if self.drafter is not None:
            self.drafter.advance_step(step)
        self.policy.new_target()

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished

    # ----- the front door: what callers set and read of the target and the queue

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """New target weights, copied in place (`ModelRunner.load_weights`): requests admitted from
        now on see them; call it between iterations."""
        self._in_flight = None  # launched with the old weights: run again with the new
        self.runner.load_weights(weights)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The target's weights by their Hugging Face names, the live tensors."""
        return self.runner.state_dict()

    def input_embeddings(self) -> torch.Tensor:
        """(V, H) the target's input embeddings, the live tensor (a draft head reads them)."""
        return self.runner.input_embeddings()

    def scoring_runner(self) -> ModelRunner:
        """A runner over the target's model and numerics with a cache of its own, for forwards apart
        from the batch (scoring prompt tokens): `ModelRunner.twin`."""
        return self.runner.twin()

    def lm_head_weight(self) -> torch.Tensor:
        """(V, H) the target's output layer, the live tensor: its values follow `load_weights`."""
        return self.runner.lm_head_weight()

    def recorded_graphs(self) -> tuple[int, float]:
        """CUDA graphs recorded so far, and the seconds that took."""
        return self.runner.recorded_graphs()

    @property
    def num_running(self) -> int:
        """Requests admitted and not finished (each holds a cache slot)."""
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        """Requests queued, not yet admitted (or preempted back to the queue)."""
        return len(self.scheduler.waiting)

    @property
    def context_room(self) -> int:
        """The most positions a request's prompt plus max_tokens may take (`Scheduler.context_room`)."""
        return self.scheduler.context_room

    def run(self, on_iteration: Callable[[list[Request]], None] | None = None) -> None:
        while self.has_unfinished:
            finished = self.iterate()
            if on_iteration is not None:
                on_iteration(finished)

    # ----- one iteration

    def iterate(self) -> list[Request]:
        """One step over the running batch: schedule -> prefill what was admitted -> draft -> verify
        -> commit -> observe. Returns the requests that finished. With a step in flight, its batch is
        steady: no scheduling, the step is collected and committed (`_overlapped`)."""
        if self._in_flight is not None:
            return self._overlapped(self._in_flight)
        schedule = self._schedule()
        finished = self._prefill(schedule.prefill)
        requests = schedule.decode
        if requests:
            drafted = self._draft(requests)
            inputs = self._verify_inputs(requests, drafted.drafts)
            if self.overlaps and self.captured.fits(inputs, drafted.drafts):
                launched = self.captured.launch(requests, drafted.drafts, inputs, with_features=False)
                return finished + self._overlapped(InFlight(requests, drafted, launched))
            result = self._verify(requests, drafted.drafts, inputs)
            committed = self._commit(requests, drafted.drafts, result)
            self._observe(requests, drafted, result, committed)
            finished += committed.finished
        return finished

    def _overlapped(self, current: InFlight) -> list[Request]:
        """Launch the step after `current` where the batch is steady, then read `current` back and
        commit it (the device runs the next step meanwhile). Returns the requests that finished."""
        self._in_flight = self._launch_next(current)
        result = self.captured.collect(current.launched)
        live = [i for i, r in enumerate(current.requests) if r.finish_reason is None]
        requests = [current.requests[i] for i in live]
        drafts = [current.drafted.drafts[i] for i in live]
        if len(live) < len(current.requests):
            result = result.select(live)
            self.telemetry.record_wasted_rows(len(current.requests) - len(live))
        committed = self._commit(requests, drafts, result)
        self._observe(requests, replace(current.drafted, drafts=drafts), result, committed)
        following = self._in_flight
        if following is not None:
            if all(r.finish_reason is not None for r in following.requests):
                self._in_flight = None
            else:  # its time runs from here: the device computed it while this one was committed
                drafted = replace(following.drafted, drafted_at=time.perf_counter())
                self._in_flight = replace(following, drafted=drafted)
        return committed.finished

    def _launch_next(self, current: InFlight) -> InFlight | None:
        """The decode step after `current`, launched before `current` is read back, over the running
        requests: one in `current` is fed its token there from the device, one position further on
        (unless `current` ends it by length); one that joined since (prefilled) is fed its pending
        token. None where the batch must change first (`Scheduler.is_steady`)."""
        if not self.scheduler.is_steady():
            return None
        in_current = {r.request_id for r in current.requests}
        requests = [
            r
            for r in sorted(self.scheduler.running, key=lambda r: r.slot)
            if r.request_id not in in_current or r.num_output_tokens + 2 <= r.params.max_tokens
        ]
        if not requests:
            return None
        ahead = [int(r.request_id in in_current) for r in requests]
        inputs = [  # a token fed from the device is packed as 0
            SequenceInput(r.slot, r.num_cached + 1, [0])
            if a
            else SequenceInput(r.slot, r.num_cached, r.pending_tokens())
            for r, a in zip(requests, ahead)
        ]
        drafted = self._draft(requests)
        launched = self.captured.launch(
            requests,
            drafted.drafts,
            inputs,
            with_features=False,
            fed_from=[r.slot if a else -1 for r, a in zip(requests, ahead)],
            ahead=ahead,
        )
        self.telemetry.record_launched_ahead()
        return InFlight(requests, drafted, launched)

    def _schedule(self) -> ScheduleDecision:
        """The scheduler's decision, with the cache slots it compacted moved."""
        schedule = self.scheduler.schedule()
        for move in schedule.moves:
            self.runner.cache.move_slots([move.source], [move.target], move.length)
        return schedule

    def _prefill(self, requests: list[Request]) -> list[Request]:
        finished = []
        for group in prefill_groups(requests, self.config.min_prefill_split):
            finished += self._prefill_group(group)
        return finished

    def _prefill_group(self, requests: list[Request]) -> list[Request]:
        """One prefill forward; a context several fresh requests share (a group's prompt) is computed
        once and its K/V copied to the others' slots (`engine.shared_prefill`)."""
        started = time.perf_counter()
        inputs = [SequenceInput(r.slot, r.num_cached, r.pending_tokens()) for r in requests]
        plan = plan_shared_prefill([i.token_ids for i in inputs], [r.num_cached == 0 for r in requests])
        out = self.runner.forward([inputs[i] for i in plan.computed])
        if plan.copies:
            self._copy_contexts(requests, inputs, plan.copies)
            rows = torch.tensor(plan.row_of, device=out.logits.device)
            out = ForwardOutput(out.logits.index_select(0, rows), out.hidden.index_select(0, rows))
        result = self._verified(requests, [Draft(r.request_id) for r in requests], out)
        self._give_features(requests, inputs, result)
        committed = self._append(requests, result, [len(i.token_ids) for i in inputs])
        computed_tokens = sum(len(inputs[i].token_ids) for i in plan.computed)
        self.telemetry.record_prefill(len(requests), computed_tokens, time.perf_counter() - started)
        return committed.finished

    def _copy_contexts(
        self, requests: list[Request], inputs: list[SequenceInput], copies: list[tuple[int, int]]
    ) -> None:
        """Copy each computed context's K/V to the slots that share it: one copy a context length."""
        by_length: dict[int, tuple[list[int], list[int]]] = {}
        for source, target in copies:
            sources, targets = by_length.setdefault(len(inputs[target].token_ids), ([], []))
            sources.append(requests[source].slot)
            targets.append(requests[target].slot)
        for length, (sources, targets) in by_length.items():
            self.runner.cache.move_slots(sources, targets, length)

    def _draft(self, requests: list[Request]) -> DraftBatch:
        """The policy decides first (lengths and drafter); then the named drafter proposes. The
        decision handed on names the drafter that did propose (None for a single drafter), so that a
        policy never files one drafter's acceptance under another's name."""
        started = time.perf_counter()
        view = self._batch_view(requests)
        decision = self.policy.decide(view)
        name = self._member_name(decision.drafter)
        used = replace(decision, drafter=name, tree=decision.tree and self._offers_trees(name))
        budgets = view.clip(decision.draft_lengths)
        drafts, upkeep = [Draft(r.request_id) for r in requests], 0.0
        if self.drafter is not None and any(budgets):
            member = self.drafter.member(used.drafter)
            drafts = build_drafts(
                member,
                requests,
                budgets,
                self.runner.config.vocab_size,
                allow_trees=self.allows_trees,
                tree=used.tree,
            )
            upkeep = member.upkeep_seconds()
        drafted_at = time.perf_counter()
        return DraftBatch(used, drafts, drafted_at - started, upkeep, drafted_at)

    def _member_name(self, name: str | None) -> str | None:
        """The member that proposes for a decision naming `name`: only a set of drafters has members."""
        return name if self.drafter is not None and name in self.drafter.member_names else None

    @property
    def allows_trees(self) -> bool:
        """Trees are verified in exact mode (rejection mode verifies chains). With batch-invariant
        numerics each tree node reads its path's keys in chain order (`model.chain_order`), so its
        tokens are plain decoding's to the bit."""
        return self.config.verify == "exact"

    def _offers_trees(self, member: str | None = None) -> bool:
        """Whether a decision may ask the drafter (or its member) for trees."""
        return self.allows_trees and self.drafter is not None and self.drafter.member(member).drafts_trees

    def _batch_view(self, requests: list[Request]) -> BatchView:
        views = [
            RequestView(
                r.request_id,
                r.group_id,
                r.num_output_tokens,
                r.num_remaining,
                r.num_drafted,
                r.num_accepted,
                r.num_forwards,
                r.num_cached,
            )
            for r in requests
        ]
        return BatchView(
            views,
            self.config.max_draft,
            trees=self._offers_trees(),
            num_waiting=self.num_waiting,
            finished_lengths=self.finished_lengths.sorted(),
        )

    def _verify_inputs(self, requests: list[Request], drafts: list[Draft]) -> list[SequenceInput]:
        """Each request's part of a verification forward: its pending token, then its draft."""
        return [
            SequenceInput(
                r.slot,
                r.num_cached,
                [*r.pending_tokens(), *d.token_ids],
                row_parents(d),
                num_logits=1 + d.num_tokens,
            )
            for r, d in zip(requests, drafts)
        ]

    def _verify(
        self, requests: list[Request], drafts: list[Draft], inputs: list[SequenceInput]
    ) -> VerifyResult:
        if self.captured is not None and self.captured.fits(inputs, drafts):
            result = self.captured.verify(requests, drafts, inputs, with_features=self._reads_features)
        else:
            result = self._forward_and_verify(requests, drafts, inputs)
        self._give_features(requests, inputs, result)
        return result

    def _forward_and_verify(
        self, requests: list[Request], drafts: list[Draft], inputs: list[SequenceInput]
    ) -> VerifyResult:
        """One forward over `inputs` and its verification, launched from Python: a verification the
        captured step does not take."""
        return self._verified(requests, drafts, self.runner.forward(inputs))

    def _verified(self, requests: list[Request], drafts: list[Draft], out: ForwardOutput) -> VerifyResult:
        """The verification of a forward launched from Python (row b is requests[b]'s), with its
        features."""
        result = verify_batch(
            requests, drafts, out.logits, self.config.seed, self.config.verify, self.config.sampling_rule
        )
        return replace(result, hidden=out.hidden)

    @property
    def _reads_features(self) -> bool:
        return self.drafter is not None and self.drafter.needs_features

    def _give_features(
        self, requests: list[Request], inputs: list[SequenceInput], result: VerifyResult
    ) -> None:
        """Hand a feature-reading drafter the hidden states (B, Tl, H) of the positions this forward
        committed: each row's last fed token, then its accepted drafts (in tree order, the accepted
        branch). One gather on the device; nothing is read back."""
        if not self._reads_features:
            return
        hidden = result.hidden
        rows = [
            [0, *(i + 1 for i in (nodes if nodes is not None else range(n)))]
            for n, nodes in zip(result.num_accepted, result.accepted_nodes)
        ]
        Tl = hidden.shape[1]
        flat = [b * Tl + j for b, kept in enumerate(rows) for j in kept]
        index = torch.tensor(flat, device=hidden.device)
        self.drafter.observe_features(
            TargetFeatures(
                tuple(r.request_id for r in requests),
                hidden.reshape(-1, hidden.shape[-1]).index_select(0, index),
                tuple(len(kept) for kept in rows),
                tuple(r.num_tokens + len(t) for r, t in zip(requests, result.token_ids)),
                tuple(
                    (i.token_ids[len(i.token_ids) - i.num_logits], *t)
                    for i, t in zip(inputs, result.token_ids)
                ),
            )
        )

    def _commit(self, requests: list[Request], drafts: list[Draft], result: VerifyResult) -> Committed:
        """Keep the accepted drafts' K/V, count the forward, append the emitted tokens. The cache
        past the accepted drafts is stale and is overwritten by later forwards."""
        # written: the pending token(s), then the accepted drafts (the rejected ones' K/V are stale)
        num_written = [r.num_tokens - r.num_cached + n for r, n in zip(requests, result.num_accepted)]
        for r, d, n, nodes in zip(requests, drafts, result.num_accepted, result.accepted_nodes):
            if nodes and nodes != list(range(len(nodes))):  # an accepted branch off the main chain
                first = r.num_cached + 1
                self.runner.cache.move(
                    r.slot, [first + i for i in nodes], [first + j for j in range(len(nodes))]
                )
            r.num_drafted += d.num_tokens
            r.num_accepted += n
            r.num_forwards += 1
        return self._append(requests, result, num_written)

    def _append(self, requests: list[Request], result: VerifyResult, num_written: list[int]) -> Committed:
        """Append each request's emitted tokens; finish those that stopped or reached max_tokens,
        and confirm to the scheduler the `num_written` cache positions of the others."""
        finished, all_kept = [], []
        for r, tokens, logprobs, written in zip(requests, result.token_ids, result.logprobs, num_written):
            kept = r.commit(tokens, logprobs, self.eos_token_ids)
            all_kept.append(kept)
            if self.drafter is not None and kept:
                self.drafter.observe(r.request_id, kept)
            if r.finish_reason is None:
                self.scheduler.confirm(r, written)
                continue
            self.scheduler.finish(r)
            self.finished_lengths.add(r.num_output_tokens)
            if self.drafter is not None:
                self.drafter.finish(r.request_id)
            finished.append(r)
        return Committed(all_kept, finished)

    def _observe(
        self, requests: list[Request], drafted: DraftBatch, result: VerifyResult, committed: Committed
    ) -> None:
        """Time and count the forward (its drafting; then verification and commit together) for the
        policy and the telemetry."""
        forward_seconds = time.perf_counter() - drafted.drafted_at
        decision, drafts = drafted.decision, drafted.drafts
        stats = ForwardStats(
            batch_size=len(requests),
            num_drafted=sum(d.num_tokens for d in drafts),
            num_accepted=sum(result.num_accepted),
            num_emitted=committed.num_emitted,
            forward_seconds=forward_seconds,
            draft_seconds=drafted.draft_seconds,
            request_ids=tuple(r.request_id for r in requests),
            drafted=tuple(d.num_tokens for d in drafts),
            accepted=tuple(result.num_accepted),
            drafter=decision.drafter,
            sources=tuple(d.source for d in drafts),
            tree=decision.tree or any(d.is_tree for d in drafts),  # asked for, or a drafter's own
            upkeep_seconds=drafted.upkeep_seconds,
        )
        self.policy.observe(stats)
        self.telemetry.record_decode(stats)


def prefill_groups(requests: list[Request], min_saving: int) -> list[list[Request]]:
    """Requests to prefill, in the forwards `plan_prefill_forwards` cuts them into (prompts here
    range from a few tokens to a few hundred, and a prefill pads every row to its forward's longest)."""
    if not requests:
        return []
    return [
        [requests[i] for i in forward]
        for forward in plan_prefill_forwards([r.num_tokens for r in requests], min_saving)
    ]


def add_requests(engine: Engine, requests: Iterable[Request]) -> dict[int, str]:
    """Queue every request that is valid; returns the error of each one that is not."""
    errors: dict[int, str] = {}
    for request in requests:
        try:
            engine.add_request(request)
        except ValueError as err:
            request.fail(str(err))
            errors[request.request_id] = str(err)
    return errors
