"""The rollout engine: continuous batching with lossless speculative decoding.

One iteration reads like the algorithm: schedule -> (prefill) -> draft -> launch -> verify -> commit
-> observe, each stage handing the next a typed value (`engine.step`). Requests finish independently,
so the running batch shrinks through the long tail; before each verification forward the policy
decides every request's draft length (and, for a draft ladder, which drafter proposes), and the
drafter proposes that many tokens (`engine.proposer`). Commit appends each request's tokens
(`Request.commit`, which alone decides how a request ends), then confirms to the scheduler what the
forward wrote to the cache (`Scheduler.confirm`): a forward that did not complete (it raised; on a
device, its results never came back) confirms nothing, and its tokens are fed again. The stages
return what they did (`StepRecord`); the observer alone records it (`engine.observer`).

Overlap (recorded steps, no drafter, `EngineConfig.overlap`) is the same path: while the batch is
steady (`Scheduler.is_steady`) the step after the current one is launched before the current one is
verified (`Stepper.launch_ahead`) and becomes the next iteration's batch. Commits stay in order and each
row's bits do not depend on the others nor its noise on the schedule, so every kept token and
log-probability is the sequential engine's; a request that stopped in the current step costs one
wasted row in the next. `load_weights`, `advance_step` and `abort` drop the launched step unread: it
confirmed nothing, so its tokens are fed again.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping

import torch

from specroll.drafting.protocol import Draft, Drafter, RequestInfo, TrainableHead
from specroll.engine.observer import StepObserver
from specroll.engine.parts import EngineParts
from specroll.engine.proposer import Proposer
from specroll.engine.request import Request, check_prompt
from specroll.engine.scheduler import ScheduleDecision, Scheduler, SchedulerConfig
from specroll.engine.step import Committed, Decoded, DraftBatch, InFlight, Prefilled, StepRecord
from specroll.engine.stepper import Stepper, prefill_groups, target_features
from specroll.engine.telemetry import Telemetry
from specroll.engine.verifier import VerifyResult
from specroll.engine_config import EngineConfig
from specroll.model.runner import ModelRunner
from specroll.policies.base import SpeculationPolicy
from specroll.policies.fixed import NoSpeculation
from specroll.policies.prompt_lengths import PromptLengths
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
        self.config = config
        self.training_step = training_step
        self._runner, self._drafter = runner, drafter
        self._policy = policy or NoSpeculation()
        if self._reads_features:
            runner.use_feature_layers(tuple(drafter.feature_layers))
        self._eos_token_ids = frozenset(runner.config.eos_token_ids)
        self._scheduler = Scheduler(
            SchedulerConfig.for_cache(runner.cache.num_slots, runner.cache.capacity, config)
        )
        self._telemetry = Telemetry()
        self._finished_lengths = FinishedLengths()  # for the policy's view of a drain (`BatchView`)
        self._prompt_lengths = PromptLengths()  # per prompt, across steps (`RequestView.prompt_lengths`)
        self._proposer = Proposer(drafter, self._policy, config, runner.config.vocab_size)
        self._stepper = Stepper(runner, config, with_features=self._reads_features)
        self._observer = StepObserver(self._policy, self._telemetry)
        self._in_flight: InFlight | None = None  # a decode step launched ahead, not yet read back

    # ----- requests

    def add_request(self, request: Request) -> None:
        """Queue a request; a bad one raises ValueError naming the problem and queues nothing."""
        check_prompt(request, self._runner.config.vocab_size)
        self._scheduler.add(request)
        if self._drafter is not None:
            info = RequestInfo(
                request.request_id, request.group_id, tuple(request.prompt_token_ids), self.training_step
            )
            self._drafter.begin(info)
            if request.output_token_ids:  # resumed elsewhere: the drafter reads what it generated
                self._drafter.observe(request.request_id, list(request.output_token_ids))

    def abort(self, request: Request) -> None:
        """Stop running `request` here and forget it (its tokens stay with it; nothing is emitted)."""
        self._in_flight = None
        self._scheduler.abort(request)
        if self._drafter is not None:
            self._drafter.finish(request.request_id)

    def describe_numerics(self) -> str:
        """The target's precision and kernels, for a run's summary (`ModelRunner.describe_numerics`)."""
        return self._runner.describe_numerics()

    def advance_step(self, step: int) -> None:
        """The RL trainer moved to training step `step`: history drafters roll their window, and a
        policy that estimates acceptance starts afresh (the target has new weights, and an online
        drafter too). The finished lengths, engine-wide and per prompt, are kept: a step moves response
        lengths only a little (`policies.prompt_lengths`)."""
        self._in_flight = None
        self.training_step = step
        if self._drafter is not None:
            self._drafter.advance_step(step)
        self._policy.new_target()

    @property
    def has_unfinished(self) -> bool:
        return self._scheduler.has_unfinished

    # ----- the front door: what callers set and read of the target, the drafter and the queue

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """New target weights, copied in place (`ModelRunner.load_weights`): requests admitted from
        now on see them; call it between iterations."""
        self._in_flight = None  # launched with the old weights: run again with the new
        self._runner.load_weights(weights)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The target's weights by their Hugging Face names, the live tensors."""
        return self._runner.state_dict()

    def input_embeddings(self) -> torch.Tensor:
        """(V, H) the target's input embeddings, the live tensor (a draft head reads them)."""
        return self._runner.input_embeddings()

    def lm_head_weight(self) -> torch.Tensor:
        """(V, H) the target's output layer, the live tensor: its values follow `load_weights`."""
        return self._runner.lm_head_weight()

    def scoring_runner(self) -> ModelRunner:
        """A runner over the target's model and numerics with a cache of its own, for forwards apart
        from the batch (scoring prompt tokens): `ModelRunner.twin`."""
        return self._runner.twin()

    def recorded_graphs(self) -> tuple[int, float]:
        """CUDA graphs recorded so far, and the seconds that took."""
        return self._runner.recorded_graphs()

    def trainable_head(self) -> TrainableHead | None:
        """The drafter's draft head for online training (`Drafter.trainable_head`); None without one."""
        return self._drafter.trainable_head() if self._drafter is not None else None

    def warm_drafter(self, warm: Callable[[Drafter], None]) -> None:
        """Let `warm` drive the drafter (a resumed run replays its last steps' responses into it)."""
        if self._drafter is not None:
            warm(self._drafter)

    @property
    def telemetry(self) -> Telemetry:
        """Per-forward records of what the engine ran (`Telemetry.clear` starts them afresh)."""
        return self._telemetry

    @property
    def overlaps(self) -> bool:
        """Whether decode steps are launched ahead: recorded steps, no drafter, `EngineConfig.overlap`."""
        return self.config.overlap and self._stepper.records_steps and self._drafter is None

    @property
    def num_running(self) -> int:
        """Requests admitted and not finished (each holds a cache slot)."""
        return len(self._scheduler.running)

    @property
    def num_waiting(self) -> int:
        """Requests queued, not yet admitted (or preempted back to the queue)."""
        return len(self._scheduler.waiting)

    @property
    def context_room(self) -> int:
        """The most positions a request's prompt plus max_tokens may take (`Scheduler.context_room`)."""
        return self._scheduler.context_room

    def parts_for_testing(self) -> EngineParts:
        """The engine's parts, for tests that fail or watch one of them; never for a caller."""
        return EngineParts(
            self._runner,
            self._scheduler,
            self._drafter,
            self._policy,
            self._stepper.captured,
            self._in_flight,
        )

    def run(self, on_iteration: Callable[[list[Request]], None] | None = None) -> None:
        while self.has_unfinished:
            finished = self.iterate()
            if on_iteration is not None:
                on_iteration(finished)

    # ----- one iteration

    def iterate(self) -> list[Request]:
        """One step: schedule -> prefill what was admitted -> draft -> launch -> verify -> commit ->
        observe. Returns the requests that finished. A step launched ahead by the iteration before is
        this one's batch (it was steady: nothing to schedule), and the step after it may be launched
        ahead in turn, before it is read back."""
        current, prefilled = self._in_flight, []
        self._in_flight = None  # should this iteration raise, the step launched ahead is dropped unread
        if current is None:
            schedule = self._schedule()
            prefilled = [
                self._prefill(g) for g in prefill_groups(schedule.prefill, self.config.min_prefill_split)
            ]
            current = self._launch(schedule.decode)
        ahead = self._launch_ahead(current)
        record = StepRecord(prefilled, self._decode(current), launched_ahead=ahead is not None)
        self._observer.observe(record)
        self._in_flight = ahead.restarted() if ahead is not None and not ahead.is_done else None
        return record.finished

    def _schedule(self) -> ScheduleDecision:
        """The scheduler's decision, with the cache slots it compacted moved."""
        schedule = self._scheduler.schedule()
        for move in schedule.moves:
            self._runner.cache.move_slots([move.source], [move.target], move.length)
        return schedule

    def _prefill(self, requests: list[Request]) -> Prefilled:
        """One prefill forward (`Stepper.prefill`), verified and committed."""
        step, num_computed = self._stepper.prefill(requests)
        result = self._stepper.verified(step)
        self._give_features(step, result)
        committed = self._append(requests, result, [len(i.token_ids) for i in step.inputs])
        seconds = time.perf_counter() - step.drafted.drafted_at
        return Prefilled(committed.finished, len(requests), num_computed, seconds)

    def _launch(self, requests: list[Request]) -> InFlight | None:
        """Draft, then launch the verification forward; None where nothing decodes."""
        return self._stepper.launch(requests, self._draft(requests)) if requests else None

    def _draft(self, requests: list[Request]) -> DraftBatch:
        return self._proposer.draft(
            requests, self.num_waiting, self._finished_lengths.sorted(), self._prompt_lengths
        )

    def _launch_ahead(self, current: InFlight | None) -> InFlight | None:
        """The decode step after `current`, launched before `current` is read back, over the running
        requests but those that `current` may end by length (`Request.can_run_ahead`, which states the
        rule and why the policy decides this step before `current` is observed). None where steps do
        not overlap or the batch must change first (`Scheduler.is_steady`)."""
        if current is None or not (self.overlaps and current.is_recorded) or not self._scheduler.is_steady():
            return None
        in_current = {r.request_id for r in current.requests}
        requests = [
            r
            for r in sorted(self._scheduler.running, key=lambda r: r.slot)
            if r.request_id not in in_current or r.can_run_ahead()
        ]
        return self._stepper.launch_ahead(current, requests, self._draft(requests)) if requests else None

    def _decode(self, current: InFlight | None) -> Decoded | None:
        """Verify the launched step and commit it, skipping the requests that finished since its
        launch (their rows are wasted)."""
        if current is None:
            return None
        step, result = current, self._stepper.verified(current)
        live = [i for i, r in enumerate(step.requests) if r.finish_reason is None]
        if len(live) < len(step.requests):
            step, result = step.select(live), result.select(live)
        self._give_features(step, result)
        committed = self._commit(step.requests, step.drafted.drafts, result)
        seconds = time.perf_counter() - step.drafted.drafted_at
        return Decoded(
            step.requests, step.drafted, result, committed, seconds, len(current.requests) - len(live)
        )

    def _give_features(self, step: InFlight, result: VerifyResult) -> None:
        """Hand a feature-reading drafter the hidden states of the positions the step committed."""
        if self._reads_features:
            self._drafter.observe_features(target_features(step.requests, step.inputs, result))

    @property
    def _reads_features(self) -> bool:
        return self._drafter is not None and self._drafter.needs_features

    # ----- commit

    def _commit(self, requests: list[Request], drafts: list[Draft], result: VerifyResult) -> Committed:
        """Keep the accepted drafts' K/V, count the forward, append the emitted tokens. The cache
        past the accepted drafts is stale and is overwritten by later forwards."""
        # written: the pending token(s), then the accepted drafts (the rejected ones' K/V are stale)
        num_written = [r.num_tokens - r.num_cached + n for r, n in zip(requests, result.num_accepted)]
        self._stepper.keep_accepted_branches(requests, result.accepted_nodes)
        for r, d, n in zip(requests, drafts, result.num_accepted):
            r.num_drafted += d.num_tokens
            r.num_accepted += n
            r.num_forwards += 1
        return self._append(requests, result, num_written)

    def _append(self, requests: list[Request], result: VerifyResult, num_written: list[int]) -> Committed:
        """Append each request's emitted tokens; finish those that stopped or reached max_tokens,
        and confirm to the scheduler the `num_written` cache positions of the others."""
        finished, all_kept = [], []
        for r, tokens, logprobs, written in zip(requests, result.token_ids, result.logprobs, num_written):
            kept = r.commit(tokens, logprobs, self._eos_token_ids)
            all_kept.append(kept)
            if self._drafter is not None and kept:
                self._drafter.observe(r.request_id, kept)
            if r.finish_reason is None:
                self._scheduler.confirm(r, written)
                continue
            self._scheduler.finish(r)
            self._finished_lengths.add(r.num_output_tokens)
            self._prompt_lengths.add(r.prompt_key, r.num_output_tokens)
            if self._drafter is not None:
                self._drafter.finish(r.request_id)
            finished.append(r)
        return Committed(all_kept, finished)


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
