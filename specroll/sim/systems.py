"""The compared systems as compositions of options: dispatch, speculation, SpecActor's two extras.

    dispatch      a dispatcher by its name in `specroll.scheduling.dispatch.DISPATCHES`: static
                  (veRL: groups pinned to workers) | divided (Seer §4.2) | context-aware (divided,
                  in Seer §4.3's order)
    speculation   an engine policy by its registry name (`specroll.policies.policy_names`): fixed-K (e.g.
                  fixed-4) | das (DAS §4.2) | bandit (TLT §5.1-5.2) | threshold | auto; or one with no
                  engine counterpart: none | decoupled (SpecActor §4.1) | grouped (Seer §4.4)
    reconfigure   SpecActor Algorithm 2 (with decoupled)
    fastest_of_n  SpecActor Algorithm 3 on freed workers

`simulate(preset, options)` builds workers, dispatcher and strategy from a preset and runs the loop.

The engine's policies run one instance per worker (`engine_policy.EnginePolicySpeculation`),
configured from the preset where the simulated set-up differs from the engine's defaults (TLT's
buckets, DAS's efficiency, the seed). Those that reason about cost get the worker's cost as a
`CostModel`: the preset's profile where it has one, else a fit to the simulated worker on the grid
`specroll profile` measures (`profiled_cost.profile_forward_cost`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from specroll.policies.auto import AutoPolicy
from specroll.policies.bandit import BanditPolicy, Bucket
from specroll.policies.base import SpeculationPolicy
from specroll.policies.cost_model import Affine, CostModel
from specroll.policies.das import DasPolicy
from specroll.policies.fixed import FixedDraftLength
from specroll.policies.profile_grid import ProfileGrid
from specroll.policies.policy_names import fixed_draft_length
from specroll.policies.threshold import BatchThreshold
from specroll.scheduling.adaptive_range import AdaptiveDraftRange
from specroll.scheduling.dispatch import DISPATCHES, Dispatcher, make_dispatcher
from specroll.scheduling.decoupled_plan import DecoupledPlan, plan_decoupled
from specroll.sim.roofline import GPUS, MODELS, ForwardCost, RooflineCost
from specroll.sim.engine_policy import EnginePolicySpeculation
from specroll.sim.loop import LoopConfig, RolloutLoop, SimTrace
from specroll.sim.rollout_metrics import RolloutMetrics
from specroll.sim.presets import Preset, worker_overhead_seconds
from specroll.sim.profiled_cost import (
    ProfiledCost,
    ProfiledDraftCost,
    forward_seconds_per_row,
    profile_forward_cost,
)
from specroll.sim.speculation import (
    DecoupledSpeculation,
    GroupedAdaptiveSpeculation,
    PlainDecoding,
    SpecCosts,
    SpeculationStrategy,
    group_bonus_from_table,
)
from specroll.sim.worker import Worker
from specroll.sim.workload import Workload


@dataclass(frozen=True)
class SystemOptions:
    dispatch: str = "static"  # one of DISPATCHES
    speculation: str = "none"  # an engine policy's registry name, or none, decoupled, grouped
    reconfigure: bool = False
    fastest_of_n: bool = False

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCHES or not is_speculation(self.speculation):
            raise ValueError(f"unknown option in {self}")
        if self.reconfigure and self.speculation != "decoupled":
            raise ValueError("reconfiguration adjusts decoupled windows (SpecActor Algorithm 2)")

    @property
    def label(self) -> str:
        parts = [self.dispatch, self.speculation]
        parts += ["reconfig"] * self.reconfigure + ["fon"] * self.fastest_of_n
        return "/".join(parts)


@dataclass(frozen=True)
class Topology:
    num_workers: int
    gpus_per_worker: int  # all GPUs of a unit, drafter GPUs included
    target: RooflineCost | ProfiledCost  # the verifier / decoding replica
    draft_gpus: int  # GPUs a drafter model runs on
    plan: DecoupledPlan | None = None


def simulate(
    preset: Preset, options: SystemOptions, record_segments: bool = False
) -> tuple[RolloutMetrics, SimTrace]:
    rng = np.random.default_rng(preset.seed)
    workload = Workload.sample(
        preset.lengths, preset.num_prompts, preset.group_size, preset.prompt_tokens, rng
    )
    base = preset.acceptance.sample(workload.num_requests, rng, workload.output_lengths / workload.max_tokens)
    topology = _topology(preset, options)
    costs = _spec_costs(preset, topology)
    strategy = make_strategy(preset, topology, costs, options, rng)
    workers = _workers(preset, workload, topology)
    dispatcher = _dispatcher(preset, options, workload, topology)
    config = LoopConfig(is_fastest_of_n=options.fastest_of_n, record_segments=record_segments)
    loop = RolloutLoop(
        workload,
        preset.acceptance,
        base,
        workers,
        dispatcher,
        strategy,
        topology.target,
        preset.num_gpus,
        config,
    )
    trace = loop.run()
    return RolloutMetrics.from_trace(trace), trace


def _workers(preset: Preset, workload: Workload, topology: Topology) -> list[Worker]:
    per_worker = math.ceil(workload.num_requests / topology.num_workers)
    capacity = topology.target.kv_capacity_tokens
    return [
        Worker(i, topology.gpus_per_worker, capacity, per_worker, preset.prompt_tokens)
        for i in range(topology.num_workers)
    ]


def _dispatcher(preset: Preset, options: SystemOptions, workload: Workload, topology: Topology) -> Dispatcher:
    """The shared dispatcher (`make_dispatcher`), as Seer runs it: chunks move through its global KV
    pool at no cost. Its static shuffle is seeded apart from the workload's draws."""
    return make_dispatcher(
        options.dispatch,
        workload.output_lengths,
        workload.group_ids,
        preset.prompt_tokens,
        topology.num_workers,
        preset.chunk_size,
        workload.max_tokens,
        seed=preset.seed,
        resume_prefill=False,
    )


def _topology(preset: Preset, options: SystemOptions) -> Topology:
    target = preset.target_cost()
    if options.speculation != "decoupled":
        return Topology(preset.num_workers, preset.gpus_per_worker, target, preset.gpus_per_worker)
    plan = _decoupled_plan(preset)
    units = preset.num_gpus // plan.gpus_per_unit
    return Topology(
        units, plan.gpus_per_unit, preset.target_cost(plan.num_verify_gpus), plan.num_draft_gpus, plan
    )


def _representative_context(preset: Preset) -> float:
    return preset.prompt_tokens + preset.lengths.median_tokens / 2.0


def _affine(latency: Callable[[int], float], batch: int) -> Affine:
    """Two-point fit at b=1 and the planning batch, as SpecActor fits D and V by profiling (§4.1)."""
    one, many = latency(1), latency(batch)
    slope = max((many - one) / max(batch - 1, 1), 0.0)
    return Affine(max(one - slope, 0.0), slope)


def _draft_latency(cost: ForwardCost | None, cpu_seconds: float, ctx: float) -> Callable[[int], float]:
    """b -> seconds of one draft token at `ctx` cached positions per row; a model-free drafter's lookup."""
    if cost is None:
        return lambda b: cpu_seconds
    return lambda b: forward_seconds_per_row(cost, b, 1, ctx)


def _verify_latency(cost: ForwardCost, window: int, ctx: float) -> Callable[[int], float]:
    """b -> seconds of verifying `window` draft tokens at `ctx` cached positions per row."""
    return lambda b: forward_seconds_per_row(cost, b, window + 1, ctx)


def _draft_cost(preset: Preset, drafter: int, num_gpus: int) -> ForwardCost | None:
    """A model drafter's forward: the profile's D(b) where the preset has a profile that measured
    one, else the draft model's roofline; None for a model-free drafter."""
    name = preset.acceptance.drafters[drafter].draft_model
    if name is None:
        return None
    profile = preset.cost_profile
    if profile is not None and profile.has_draft_model:
        return ProfiledDraftCost(profile.draft_affine)
    model = MODELS[name]
    return RooflineCost(model, GPUS[preset.gpu], num_gpus, worker_overhead_seconds(model, num_gpus))


def _decoupled_plan(preset: Preset) -> DecoupledPlan:
    """Algorithm 1 over verifier degrees {TP, 2 TP} with the ladder's first drafter."""
    ctx = _representative_context(preset)
    batch = preset.num_requests // preset.num_workers
    p = preset.acceptance.drafters[0].mean_acceptance

    def draft(g_d: int) -> Affine:
        cpu = preset.acceptance.drafters[0].cpu_draft_seconds
        return _affine(_draft_latency(_draft_cost(preset, 0, g_d), cpu, ctx), batch)

    def verify(g_v: int, window: int) -> Affine:
        return _affine(_verify_latency(preset.target_cost(g_v), window, ctx), batch)

    options = (preset.gpus_per_worker, 2 * preset.gpus_per_worker)
    return plan_decoupled(preset.num_requests, preset.num_gpus, options, p, draft, verify)


def _spec_costs(preset: Preset, topology: Topology) -> SpecCosts:
    drafters = preset.acceptance.drafters
    models = tuple(_draft_cost(preset, d, topology.draft_gpus) for d in range(len(drafters)))
    return SpecCosts(topology.target, models, tuple(d.cpu_draft_seconds for d in drafters))


def _no_spec(preset, topology, costs, options, rng):
    return PlainDecoding(costs)


def _decoupled(preset, topology, costs, options, rng):
    """The worker's own costs at the preset's representative context, per drafter and window."""
    ctx = _representative_context(preset)
    draft = lambda d: _draft_latency(costs.drafters[d], costs.cpu_draft_seconds[d], ctx)
    verify = lru_cache(maxsize=None)(
        lambda w: lru_cache(maxsize=None)(_verify_latency(topology.target, w, ctx))
    )
    return DecoupledSpeculation(costs, topology.plan, options.reconfigure, draft, verify)


def _grouped(preset, topology, costs, options, rng):
    refs, rates = zip(*preset.group_acceptance) if preset.group_acceptance else ((0,), (0.0,))
    return GroupedAdaptiveSpeculation(
        costs, _seer_draft_range(preset, topology, costs), group_bonus_from_table(refs, rates)
    )


def _seer_draft_range(preset: Preset, topology: Topology, costs: SpecCosts) -> AdaptiveDraftRange:
    """Seer §4.4's thresholds from the worker's cost (dense or MoE), pre-computed for the tail's
    acceptance: a request whose group's other requests have all finished (ASSUMPTION: the paper
    gives neither the thresholds nor the rate they were computed for)."""
    ctx = _representative_context(preset)
    refs, rates = zip(*preset.group_acceptance) if preset.group_acceptance else ((0,), (0.0,))
    alpha = (
        float(np.interp(preset.group_size - 1, refs, rates)) or preset.acceptance.drafters[0].mean_acceptance
    )

    def seconds(batch: int, k: int) -> float:
        verify = forward_seconds_per_row(topology.target, batch, k + 1, ctx)
        return verify + (costs.cpu_draft_seconds[0] if k else 0.0)

    max_batch = _max_batch(preset, topology)
    return AdaptiveDraftRange.from_cost(seconds, alpha, preset.max_draft_per_request, max_batch)


# TLT Table 4: larger batches verify fewer tokens. Buckets of running requests [1,8), [8,17), [17,...),
# each offering the draft lengths min(draft depth, tokens to verify) of its two strategies.
TLT_BUCKETS = (Bucket(1, (6, 8)), Bucket(8, (3, 4)), Bucket(17, (1, 2)))


def tlt_buckets(threshold: int) -> tuple[Bucket, ...]:
    """TLT's buckets with its elastic threshold (§5.1) as a last bucket whose one arm is plain decoding."""
    return (*(b for b in TLT_BUCKETS if b.min_batch_size <= threshold), Bucket(threshold + 1, (0,)))


def policy_cost_model(preset: Preset, topology: Topology, costs: SpecCosts) -> CostModel:
    """The CostModel the engine's policies reason with on this worker; drafting is free unless the
    ladder's first drafter is a model (as the rollout does for model-free drafters)."""
    draft = costs.drafters[0]
    if preset.cost_profile is not None:
        return preset.cost_profile if draft is not None else preset.cost_profile.with_draft(Affine(0.0, 0.0))
    contexts = (
        preset.prompt_tokens,
        int(_representative_context(preset)),
        preset.prompt_tokens + preset.lengths.max_tokens // 2,
    )
    grid = ProfileGrid.standard(_max_batch(preset, topology), preset.max_draft_per_request, contexts)
    return profile_forward_cost(topology.target, grid, draft, source=f"simulated {preset.name} worker")


def _max_batch(preset: Preset, topology: Topology) -> int:
    return math.ceil(preset.num_requests / topology.num_workers)


PolicyMaker = Callable[[Preset, Topology, CostModel], SpeculationPolicy]

POLICIES: dict[str, PolicyMaker] = {  # by registry name; fixed-K is parsed (`_policy_maker`)
    "das": lambda preset, topology, model: DasPolicy(model, efficiency=preset.das_efficiency),
    "bandit": lambda preset, topology, model: BanditPolicy(
        tlt_buckets(preset.tlt_threshold), seed=preset.seed
    ),
    "threshold": lambda preset, topology, model: BatchThreshold.from_cost_model(
        model,
        alpha=preset.acceptance.drafters[0].mean_acceptance,
        max_batch_size=_max_batch(preset, topology),
    ),
    "auto": lambda preset, topology, model: AutoPolicy(model, seed=preset.seed),
}


def _policy_maker(name: str) -> PolicyMaker | None:
    k = fixed_draft_length(name)
    if k is not None:
        return lambda preset, topology, model: FixedDraftLength(k)
    return POLICIES.get(name)


def _engine_policy(preset, topology, costs, options, rng):
    model = policy_cost_model(preset, topology, costs)
    make = _policy_maker(options.speculation)
    return EnginePolicySpeculation(
        costs, lambda: make(preset, topology, model), preset.max_draft_per_request, seed=preset.seed
    )


STRATEGIES = {"none": _no_spec, "decoupled": _decoupled, "grouped": _grouped}  # no engine counterpart


def is_speculation(name: str) -> bool:
    return name in STRATEGIES or _policy_maker(name) is not None


def make_strategy(
    preset: Preset,
    topology: Topology,
    costs: SpecCosts,
    options: SystemOptions,
    rng: np.random.Generator | None,
) -> SpeculationStrategy:
    build = STRATEGIES.get(options.speculation, _engine_policy)
    return build(preset, topology, costs, options, rng)


SYSTEMS: dict[str, SystemOptions] = {
    "verl": SystemOptions(),
    "vanilla-spec": SystemOptions(speculation="fixed-4"),  # ASSUMPTION: k=4, vLLM's usual draft-model setting
    "decoupled": SystemOptions(speculation="decoupled"),
    "decoupled+reconfig": SystemOptions(speculation="decoupled", reconfigure=True),
    "specactor": SystemOptions(speculation="decoupled", reconfigure=True, fastest_of_n=True),
    "divided": SystemOptions(dispatch="divided"),
    "divided+context": SystemOptions(dispatch="context-aware"),
    "seer": SystemOptions(dispatch="context-aware", speculation="grouped"),
    "das": SystemOptions(speculation="das"),
    "tlt": SystemOptions(speculation="bandit"),
    "auto": SystemOptions(speculation="auto"),
}
