"""The engine and the simulator show a policy the same batch through one builder
(`policies.batch_view_builder`): the same state gives equal `BatchView`s, and `auto` decides alike."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specroll.engine.proposer import Proposer
from specroll.engine.request import Request, SamplingParams, Status
from specroll.engine_config import EngineConfig
from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, DraftDecision, ForwardStats
from specroll.policies.cost_model import CostModel
from specroll.policies.fixed import FixedDraftLength
from specroll.policies.prompt_lengths import PromptLengths
from specroll.policies.remaining_lengths import FinishedLengths
from specroll.sim.engine_policy import EnginePolicySpeculation
from specroll.sim.presets import get_preset
from specroll.sim.speculation import RunningBatch
from specroll.sim.systems import SystemOptions, _spec_costs, _topology

PROMPT_TOKENS, MAX_DRAFT = 12, 4


@dataclass(frozen=True)
class State:
    """A worker's running batch and what its engine knows beside it."""

    positions: tuple[int, ...]  # output tokens of each running request
    groups: tuple[int, ...]  # its prompt
    acceptance: tuple[float, ...]  # what the simulated drafter's drafts accept at
    finished: tuple[tuple[int, int], ...]  # (group, length) of the requests the engine finished
    num_waiting: int  # requests queued for a slot
    max_tokens: int


SMALL = State((1, 7, 30, 61), (0, 0, 1, 2), (0.6,) * 4, ((0, 40), (1, 25), (1, 33), (3, 12)), 0, 64)


class Recorder:
    """A fixed-K policy that keeps the views it decides on and the stats it is told."""

    name = "recorder"

    def __init__(self, policy) -> None:
        self.policy, self.views, self.stats = policy, [], []

    def decide(self, batch: BatchView) -> DraftDecision:
        self.views.append(batch)
        return self.policy.decide(batch)

    def observe(self, stats: ForwardStats) -> None:
        self.stats.append(stats)
        self.policy.observe(stats)

    def new_target(self) -> None:
        self.policy.new_target()


def _prompt(group: int) -> tuple[int, ...]:
    return tuple(range(group, group + PROMPT_TOKENS))


def _prompt_key(group: int) -> int:
    return Request(0, group, 0, _prompt(group), SamplingParams()).prompt_key


def _histories(state: State, key) -> tuple[PromptLengths, FinishedLengths]:
    lengths, finished = PromptLengths(), FinishedLengths()
    for group, length in state.finished:
        lengths.add(key(group), length)
        finished.add(length)
    return lengths, finished


def _sim_batch(state: State) -> RunningBatch:
    """The state as the simulator's loop hands it over (`RolloutLoop._view`): prompts by group id."""
    lengths, finished = _histories(state, key=lambda group: group)
    b = len(state.positions)
    return RunningBatch(
        worker=0,
        request_ids=np.arange(b),
        group_ids=np.asarray(state.groups),
        drafters=np.zeros(b, dtype=np.int64),
        acceptance=np.asarray(state.acceptance),
        positions=np.asarray(state.positions, dtype=np.float64) + 0.4,  # fluid positions: floored
        finished_siblings=np.zeros(b),
        max_tokens=state.max_tokens,
        prompt_tokens=PROMPT_TOKENS,
        num_waiting=state.num_waiting,
        finished_lengths=finished.sorted(),
        prompt_lengths=lengths,
    )


def _engine_requests(state: State, stats: list[ForwardStats]) -> list[Request]:
    """The same requests as the engine holds them: running, their cache the prompt and all but the
    newest output token (`Request`'s KV invariant), their counters grown by each forward's stats as
    `Engine._commit` grows them."""
    requests = []
    for i, (group, n) in enumerate(zip(state.groups, state.positions)):
        r = Request(i, group, 0, _prompt(group), SamplingParams(max_tokens=state.max_tokens))
        r.output_token_ids, r.status = list(range(n)), Status.RUNNING
        r.num_cached = PROMPT_TOKENS + n - 1
        requests.append(r)
    for s in stats:
        for request_id, drafted, accepted in zip(s.request_ids, s.drafted, s.accepted):
            requests[request_id].num_drafted += drafted
            requests[request_id].num_accepted += accepted
            requests[request_id].num_forwards += 1
    return requests


def _engine_view(state: State, policy, stats: list[ForwardStats]) -> BatchView:
    """The engine's path: `Proposer._batch_view` over its requests, queue and lengths, its prompts
    keyed by their token ids."""
    lengths, finished = _histories(state, key=_prompt_key)
    proposer = Proposer(None, policy, EngineConfig(max_draft=MAX_DRAFT), vocab_size=32)
    requests = _engine_requests(state, stats)
    return proposer._batch_view(requests, state.num_waiting, finished.sorted(), lengths)


def _simulator(policy) -> EnginePolicySpeculation:
    preset = get_preset("DeepScaleR-7B")
    costs = _spec_costs(preset, _topology(preset, SystemOptions()))
    return EnginePolicySpeculation(costs, lambda: policy, MAX_DRAFT, seed=5)


def _warmed(state: State, num_forwards: int) -> tuple[EnginePolicySpeculation, Recorder]:
    """A simulator whose worker ran `num_forwards` forwards of fixed drafts on the state's batch."""
    recorder = Recorder(FixedDraftLength(MAX_DRAFT))
    simulator, batch = _simulator(recorder), _sim_batch(state)
    for _ in range(num_forwards):
        simulator.observe(batch, simulator.decide(batch), 0.01)
    return simulator, recorder


def _fields(view: BatchView) -> tuple:
    return (view.requests, view.max_draft, view.trees, view.num_waiting, list(view.finished_lengths))


def test_the_same_state_gives_the_engine_and_the_simulator_equal_views():
    """Two forwards in the simulator; the engine's requests counted as its commit counts them."""
    simulator, recorder = _warmed(SMALL, num_forwards=2)
    assert any(sum(s.accepted) for s in recorder.stats)
    simulated = simulator.batch_view(_sim_batch(SMALL))
    engine = _engine_view(SMALL, recorder, recorder.stats)
    assert _fields(simulated) == _fields(engine)
    assert simulated.num_waiting == 0 and list(simulated.finished_lengths) == [12, 25, 33, 40]
    assert simulated.requests[2].prompt_lengths == (25, 33)  # its prompt's, by group and by token ids
    assert simulated.requests[0].num_context_tokens == PROMPT_TOKENS  # the prefill's token is fed next


# a drain of 64 requests 50 tokens in, half drafting well and half barely (`test_auto_drain`): by the
# lengths the engine's requests finished with, a slow one is nearly always among the last to finish
DRAIN = State(
    positions=(50,) * 64,
    groups=tuple(range(64)),
    acceptance=(0.8,) * 32 + (0.05,) * 32,
    finished=tuple((64, 60 + (i * i) % 941) for i in range(400)),
    num_waiting=0,
    max_tokens=1000,
)


def test_auto_decides_alike_on_the_engine_and_the_simulator():
    """After the same forwards, a fresh `auto` decides on each path's view of the drain; they agree,
    and the decision turns on what the simulator's view once lacked (the queue, finished lengths)."""
    model = CostModel(c_base=0.02, c_tok=1e-4)
    simulator, recorder = _warmed(DRAIN, num_forwards=100)
    recorder.policy = AutoPolicy(model, seed=3, probe_every=10**9)
    plan = simulator.decide(_sim_batch(DRAIN))
    engine = _engine_view(DRAIN, recorder, recorder.stats)
    decision = AutoPolicy(model, seed=3, probe_every=10**9).decide(engine)
    assert plan.draft_len.tolist() == engine.clip(decision.draft_lengths)
    assert max(decision.draft_lengths) == 0
    unreported = replace(engine, num_waiting=None, finished_lengths=())  # the simulator's view before
    assert max(AutoPolicy(model, seed=3, probe_every=10**9).decide(unreported).draft_lengths) >= 1


def test_a_simulated_forward_emits_as_a_commit_keeps():
    """Accepted drafts and one more a copy, none past max_tokens."""
    simulator, recorder = _warmed(SMALL, num_forwards=1)
    stats = recorder.stats[0]
    remaining = [SMALL.max_tokens - n for n in SMALL.positions]
    kept = [min(a + 1, left) for a, left in zip(stats.accepted, remaining)]
    assert stats.num_emitted == sum(kept)
