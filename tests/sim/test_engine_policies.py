"""The simulator's workers run the engine's own speculation policies, and a profile is its cost model."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from specroll.policies.acceptance_estimates import AcceptanceTracker
from specroll.policies.auto import AutoPolicy
from specroll.policies.bandit import BanditPolicy
from specroll.policies.base import BatchView, DraftDecision, ForwardStats
from specroll.policies.cost_model import CostModel
from specroll.policies.das import DasPolicy
from specroll.policies.fixed import FixedDraftLength
from specroll.policies.policy_names import make_policy
from specroll.policies.prompt_lengths import PromptLengths
from specroll.policies.threshold import BatchThreshold
from specroll.sim.engine_policy import EnginePolicySpeculation
from specroll.sim.presets import get_preset
from specroll.sim.profiled_cost import ProfiledCost, ProfiledDraftCost
from specroll.sim.speculation import RunningBatch
from specroll.sim.systems import (
    POLICIES,
    SYSTEMS,
    SystemOptions,
    _spec_costs,
    _topology,
    make_strategy,
    policy_cost_model,
    simulate,
    tlt_buckets,
)
from specroll.sim.workload import LengthDistribution, Workload
from tests.sim.test_loop import DAS_SMALL, SMALL

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "policy.cost.json"


def running_batch(acceptance, positions, max_tokens=16384, worker=0) -> RunningBatch:
    b = len(positions)
    return RunningBatch(
        worker,
        np.arange(b),
        np.zeros(b, dtype=np.int64),
        np.zeros(b, dtype=np.int64),
        np.asarray(acceptance, dtype=np.float64),
        np.asarray(positions, dtype=np.float64),
        np.zeros(b),
        max_tokens,
        prompt_tokens=512,
    )


def strategy_for(preset, speculation):
    options = SystemOptions(speculation=speculation)
    topology = _topology(preset, options)
    return make_strategy(preset, topology, _spec_costs(preset, topology), options, None)


@pytest.mark.parametrize(
    "speculation, policy_class",
    [
        ("fixed-4", FixedDraftLength),
        ("das", DasPolicy),
        ("bandit", BanditPolicy),
        ("threshold", BatchThreshold),
        ("auto", AutoPolicy),
    ],
)
def test_each_worker_runs_its_own_engine_policy(speculation, policy_class):
    strategy = strategy_for(DAS_SMALL, speculation)
    assert isinstance(strategy, EnginePolicySpeculation)
    for worker in (0, 1):
        view = running_batch([0.6, 0.6], [10, 20], worker=worker)
        plan = strategy.decide(view)
        strategy.observe(view, plan, 0.01)
    assert set(strategy.policies) == {0, 1}
    assert all(isinstance(p, policy_class) for p in strategy.policies.values())
    assert strategy.policies[0] is not strategy.policies[1]


def test_a_speculation_name_is_the_registrys_and_makes_its_class():
    topology = _topology(DAS_SMALL, SystemOptions())
    model = policy_cost_model(DAS_SMALL, topology, _spec_costs(DAS_SMALL, topology))
    for name, make in POLICIES.items():
        assert type(make(DAS_SMALL, topology, model)) is type(make_policy(name, model))
    fixed = strategy_for(DAS_SMALL, "fixed-3").policy(0)
    assert type(fixed) is type(make_policy("fixed-3")) and fixed.k == 3


def test_das_and_bandit_learn_through_the_engine_contract():
    das = strategy_for(DAS_SMALL, "das")
    view = running_batch([0.6, 0.6], [10, 20])
    das.observe(view, das.decide(view), 0.01)
    das.decide(view)
    assert set(das.policies[0].tracker._requests) == {0, 1}  # DasPolicy's own tracker saw the batch
    bandit = strategy_for(DAS_SMALL, "bandit")
    plan = bandit.decide(view)
    bandit.observe(view, plan, 0.01)
    assert plan.draft_len.tolist() == [6, 6]  # TLT's first arm of the smallest bucket, tried first
    assert bandit.policies[0].median_reward(0, 6) > 0


def test_das_drafts_for_a_lone_long_request():
    """Memory-bound forwards: DasPolicy gives the long request the longest draft, the one about to
    reach max_tokens none."""
    strategy = strategy_for(get_preset("DeepScaleR-7B"), "das")
    plan = strategy.decide(running_batch([0.6, 0.6], [100.0, 16300.0]))
    assert plan.draft_len.tolist() == [8, 0]
    assert plan.tokens_per_iter[0] > 2.0 and plan.tokens_per_iter[1] == 1.0


class Recorder:
    name = "recorder"

    def __init__(self, k):
        self.k, self.batches, self.stats = k, [], []

    def decide(self, batch: BatchView) -> DraftDecision:
        self.batches.append(batch)
        return DraftDecision.uniform(self.k, batch.batch_size)

    def observe(self, stats: ForwardStats) -> None:
        self.stats.append(stats)

    def new_target(self) -> None:
        pass


def test_the_step_contract_literal():
    recorder = Recorder(k=5)
    strategy = EnginePolicySpeculation(strategy_for(DAS_SMALL, "auto").costs, lambda: recorder, max_draft=4)
    view = running_batch([0.0, 0.99], [100.7, 16382.0])
    plan = strategy.decide(view)
    assert plan.draft_len.tolist() == [4, 1]  # clipped to max_draft and to num_remaining - 1
    first = recorder.batches[0].requests
    # cached context as the engine counts it: the prompt and every output token but the newest
    assert [(r.num_output_tokens, r.num_remaining, r.num_context_tokens) for r in first] == [
        (100, 16284, 611),
        (16382, 2, 16893),
    ]
    strategy.observe(view, plan, 0.25)
    stats = recorder.stats[0]
    assert stats.drafted == (4, 1) and stats.accepted[0] == 0 and stats.forward_seconds == 0.25
    assert stats.num_emitted == sum(stats.accepted) + 2
    strategy.decide(view)
    again = recorder.batches[1].requests
    assert [(r.num_drafted, r.num_accepted, r.num_forwards) for r in again] == [
        (4, 0, 1),
        (1, stats.accepted[1], 1),
    ]


def test_drawn_counters_give_the_engine_tracker_an_unbiased_alpha():
    """One forward per segment, drawn: the tracker's estimate converges on the true acceptance, where
    expected counts would read (E - 1) / E = 0.49 at alpha 0.6, k 2."""
    strategy = EnginePolicySpeculation(
        strategy_for(DAS_SMALL, "auto").costs, lambda: FixedDraftLength(2), 8, seed=3
    )
    tracker = AcceptanceTracker(prior_strength=0.0)
    view = running_batch(np.full(64, 0.6), np.full(64, 10.0))
    for _ in range(100):
        tracker.update(strategy.batch_view(view))
        strategy.observe(view, strategy.decide(view), 0.01)
    assert tracker.pooled_alpha == pytest.approx(0.6, abs=0.02)


def test_tlt_threshold_is_a_plain_bucket():
    assert [(b.min_batch_size, b.arms) for b in tlt_buckets(32)][-2:] == [(17, (1, 2)), (33, (0,))]
    assert [b.min_batch_size for b in tlt_buckets(10)] == [1, 8, 11]


def _lengths(preset):
    return Workload.sample(
        preset.lengths,
        preset.num_prompts,
        preset.group_size,
        preset.prompt_tokens,
        np.random.default_rng(preset.seed),
    ).output_lengths


def test_the_simulator_runs_with_auto():
    assert simulate(SMALL, SYSTEMS["auto"])[0].makespan_seconds > 0
    lone = SMALL.with_overrides(
        num_gpus=4, num_prompts=1, group_size=1, lengths=LengthDistribution(2000, 0.0, 0.0, 4096)
    )
    assert (
        simulate(lone, SYSTEMS["auto"])[0].makespan_seconds
        < simulate(lone, SYSTEMS["verl"])[0].makespan_seconds
    )


def test_the_simulator_runs_on_a_profile():
    """`profiles/policy.cost.json` (`specroll profile` of the bundled policy on a CPU) costs every
    worker's forwards, its D(b) the model drafter's, and is what the engine's policies reason with."""
    model = CostModel.load(PROFILE)
    preset = SMALL.with_overrides(cost_profile=model)
    topology = _topology(preset, SYSTEMS["auto"])
    costs = _spec_costs(preset, topology)
    assert isinstance(topology.target, ProfiledCost) and isinstance(costs.drafters[0], ProfiledDraftCost)
    assert policy_cost_model(preset, topology, costs) == model
    assert topology.target.kv_capacity_tokens == SMALL.target_cost().kv_capacity_tokens
    lengths = _lengths(preset)
    for name in ("verl", "auto", "tlt"):
        metrics, _ = simulate(preset, SYSTEMS[name])
        assert metrics.makespan_seconds >= lengths.max() / (preset.max_draft_per_request + 1) * model.c_base
    plain = simulate(preset, SYSTEMS["verl"])[0].makespan_seconds
    assert plain >= lengths.max() * model.forward_seconds(1, 1, 0.0)
    # the profile, not the preset's roofline, costs this run (the roofline's H100 worker: 46 s here, 29 s)
    assert plain < 0.8 * simulate(SMALL, SYSTEMS["verl"])[0].makespan_seconds


def test_seer_and_specactor_choices_are_the_shared_torch_free_functions():
    """The mechanisms the engine has no counterpart for (issue 38) live in `specroll.scheduling`,
    beside the dispatchers both run: the simulator only calls them."""
    from specroll.scheduling import adaptive_range, decoupled_plan
    from specroll.sim import speculation

    seer = strategy_for(get_preset("Moonlight"), "grouped")
    assert type(seer.draft_range) is adaptive_range.AdaptiveDraftRange and seer.draft_range.by_concurrency
    assert speculation.best_request_plan is decoupled_plan.best_request_plan
    specactor = make_strategy(
        SMALL,
        _topology(SMALL, SYSTEMS["specactor"]),
        _spec_costs(SMALL, _topology(SMALL, SYSTEMS["specactor"])),
        SYSTEMS["specactor"],
        None,
    )
    plan = specactor.decide(running_batch([0.7], [100]))
    expected = decoupled_plan.best_request_plan(
        0.7, 1, specactor.max_window, specactor.draft_seconds(0), specactor.verify_seconds
    )
    assert plan.draft_len.tolist() == [expected.window]


class _Recording:
    """A DAS policy that keeps every view it decides on."""

    name = "das"

    def __init__(self, policy: DasPolicy, views: list[BatchView]) -> None:
        self.policy, self.views = policy, views

    def decide(self, batch: BatchView) -> DraftDecision:
        self.views.append(batch)
        return self.policy.decide(batch)

    def observe(self, stats: ForwardStats) -> None:
        self.policy.observe(stats)

    def new_target(self) -> None:
        self.policy.new_target()


def test_a_request_view_carries_its_groups_finished_lengths():
    strategy = strategy_for(DAS_SMALL, "das")
    lengths = PromptLengths()
    lengths.add(0, 50)
    lengths.add(0, 40)
    batch = replace(
        running_batch([0.6, 0.6, 0.6], [10, 20, 30]), group_ids=np.array([0, 0, 1]), prompt_lengths=lengths
    )
    assert [v.prompt_lengths for v in strategy.batch_view(batch).requests] == [(40, 50), (40, 50), ()]


def test_the_simulated_das_sees_each_requests_group_lengths(monkeypatch):
    """A simulated rollout is one step: a request's prompt history is the lengths its group's requests
    that finished before it reached, sorted, one tuple a group in a batch."""
    views: list[BatchView] = []
    monkeypatch.setitem(POLICIES, "das", lambda preset, topology, model: _Recording(DasPolicy(model), views))
    _, trace = simulate(DAS_SMALL, SYSTEMS["das"])
    size = DAS_SMALL.group_size
    reached = [sorted(trace.generated[g * size : (g + 1) * size].astype(int).tolist()) for g in range(8)]
    seen = [(v.group_id, v.prompt_lengths) for batch in views for v in batch.requests]
    assert any(lengths for _, lengths in seen)
    for group, lengths in seen:
        assert list(lengths) == sorted(lengths) and len(lengths) < size
        assert all(lengths.count(n) <= reached[group].count(n) for n in lengths)
    for batch in views:
        by_group = {}
        for v in batch.requests:
            assert by_group.setdefault(v.group_id, v.prompt_lengths) is v.prompt_lengths
