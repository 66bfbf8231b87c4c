"""The papers' rollout set-ups. Every assumption is a field here, with the section it comes from.

Figures the papers state are cited as such. Figures they do not state (length distributions, per-token
acceptance rates, drafter costs) are marked ASSUMPTION with the observation they were chosen to
match; none is tuned to a single reproduced ratio.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specroll.policies.cost_model import CostModel
from specroll.sim.acceptance_rates import AcceptanceModel, DrafterProfile
from specroll.sim.roofline import GPUS, MODELS, ModelSpec, RooflineCost, calibrated_overhead
from specroll.sim.profiled_cost import ProfiledCost
from specroll.sim.workload import LengthDistribution

# Per-forward overhead: a launch/sampling floor plus a per-layer tensor/expert-parallel term.
# Floor: TLT Table 2 measures Qwen2.5-7B at BS=1, TP=1 on H100 at 164.65 tok/s (6.07 ms), 0.40 ms
# above the roofline's weight-read time. Per-layer term: calibrated so Qwen2.5-32B TP4 on H100
# decodes at 13 ms at batch 1 (SpecActor §5.1).
BASE_OVERHEAD_S = 0.00607 - RooflineCost(MODELS["qwen2.5-7b"], GPUS["H100"], 1, 0.0).forward_seconds(1, 1, 0)
PARALLEL_OVERHEAD_PER_LAYER_S = (
    calibrated_overhead(MODELS["qwen2.5-32b"], GPUS["H100"], 4, 0.013) - BASE_OVERHEAD_S
) / MODELS["qwen2.5-32b"].num_layers


def worker_overhead_seconds(model: ModelSpec, num_gpus: int) -> float:
    parallel = PARALLEL_OVERHEAD_PER_LAYER_S * model.num_layers if num_gpus > 1 else 0.0
    return BASE_OVERHEAD_S + parallel


@dataclass(frozen=True)
class Preset:
    name: str
    model: str  # cost_model.MODELS key
    gpu: str
    num_gpus: int  # whole rollout cluster
    gpus_per_worker: int
    num_prompts: int
    group_size: int
    prompt_tokens: int
    lengths: LengthDistribution
    acceptance: AcceptanceModel  # drafter ladder, best first
    chunk_size: int = 8192  # Seer §4.2 ("e.g. 8K tokens")
    max_draft_per_request: int = 8  # Seer Table 2 caps drafts at 8 tokens
    max_draft_per_batch: int = 128  # not read by Seer's system, whose batch threshold comes from the cost
    group_acceptance: tuple[tuple[int, float], ...] = ()  # (finished siblings, acceptance) for grouped drafts
    das_efficiency: float = 1.0
    tlt_threshold: int = 32  # TLT §5.1 default
    seed: int = 0
    sources: dict[str, str] = field(default_factory=dict)
    cost_profile: CostModel | None = None  # a `specroll profile` fit: every worker's forwards cost this

    def __post_init__(self) -> None:
        if self.num_gpus % self.gpus_per_worker:
            raise ValueError("num_gpus must be a multiple of gpus_per_worker")
        if self.model not in MODELS or self.gpu not in GPUS:
            raise ValueError(f"unknown model {self.model!r} or GPU {self.gpu!r}")

    @property
    def num_workers(self) -> int:
        return self.num_gpus // self.gpus_per_worker

    @property
    def num_requests(self) -> int:
        return self.num_prompts * self.group_size

    def target_cost(self, num_gpus: int | None = None) -> RooflineCost | ProfiledCost:
        """The roofline of `model` on `num_gpus` GPUs, or the profile where one is given; the KV
        capacity comes from the roofline either way (a profile measures time, not memory)."""
        gpus = num_gpus or self.gpus_per_worker
        model = MODELS[self.model]
        roofline = RooflineCost(model, GPUS[self.gpu], gpus, worker_overhead_seconds(model, gpus))
        if self.cost_profile is None:
            return roofline
        return ProfiledCost(self.cost_profile, roofline.kv_capacity_tokens)

    def with_overrides(self, **changes) -> "Preset":
        return replace(self, **changes)


# SpecActor drafters (§5.1: Qwen2.5-0.5B, Qwen2.5-1.5B and an n-gram drafter; 0.5B is the sweet
# spot). Per-token acceptance anchored on §5.2: the last-finishing requests skip 16.9-43.6% of
# iterations with n-gram (1.2-1.8 tokens per forward, alpha ~0.2-0.45 at k=4) and 40.9-73.5% under
# SpecActor's model drafters (1.7-3.8 tokens per forward, alpha ~0.45-0.85). ASSUMPTION: means
# 0.65 / 0.70 / 0.30, Beta spread per request (Fig. 7: the fastest drafter differs by request).
SPECACTOR_DRAFTERS = AcceptanceModel(
    (
        DrafterProfile("qwen2.5-0.5b", 0.65, 6.0, draft_model="qwen2.5-0.5b"),
        DrafterProfile("qwen2.5-1.5b", 0.70, 6.0, draft_model="qwen2.5-1.5b"),
        DrafterProfile("ngram", 0.30, 3.0, cpu_draft_seconds=0.0002),
    )
)

# ASSUMPTION (SpecActor §2.2): lengths chosen so the veRL baseline wastes about half of its GPU
# time waiting for the slowest worker ("averagely 50%" on DAPO-32B-20K) under the 20K budget.
SPECACTOR_LENGTHS = LengthDistribution(
    median_tokens=4000, group_sigma=0.8, within_group_sigma=0.45, max_tokens=20480
)

_SPECACTOR_SOURCES = {
    "cluster": "SpecActor §5.1: 256 GPUs, TP4 rollout workers, Hopper 80 GB",
    "model": "SpecActor §5.1: Qwen2.5-32B",
    "latency": "SpecActor §5.1: 13 ms per token at per-worker batch 1 (calibration point)",
    "lengths": "ASSUMPTION matching SpecActor §2.2 (about 50% GPU time idle in veRL); 20K budget §5.1",
    "acceptance": "ASSUMPTION anchored on SpecActor §5.2 skipped-iteration ranges "
    "(n-gram 16.9-43.6%, SpecActor 40.9-73.5%)",
}


def _specactor(name: str, num_prompts: int, group_size: int, batch_note: str) -> Preset:
    return Preset(
        name=name,
        model="qwen2.5-32b",
        gpu="H100",
        num_gpus=256,
        gpus_per_worker=4,
        num_prompts=num_prompts,
        group_size=group_size,
        prompt_tokens=1024,
        lengths=SPECACTOR_LENGTHS,
        acceptance=SPECACTOR_DRAFTERS,
        sources={**_SPECACTOR_SOURCES, "batch": batch_note, "prompt_tokens": "ASSUMPTION: 1K-token prompts"},
    )


# Seer's grouped suffix-tree drafts: Seer Table 2, multi-path k=4 column, mean acceptance length
# (with bonus) 1.85 / 2.25 / 2.59 / 2.85 for 0 / 1 / 5 / 15 sibling references at max draft 8, turned
# into per-token rates with policies.speculation_math.alpha_from_acceptance_length(length, 8).
SEER_GROUP_ACCEPTANCE = ((0, 0.460), (1, 0.558), (5, 0.619), (15, 0.657))
SEER_DRAFTERS = AcceptanceModel(
    (DrafterProfile("grouped-suffix-tree", 0.460, 6.0, cpu_draft_seconds=0.0003),)
)

_SEER_SOURCES = {
    "cluster": "Seer §6.1 Table 5: GPUs, GPUs per instance; H800 nodes",
    "batch": "Seer Table 5: prompts per iteration, requests per prompt",
    "max_tokens": "Seer Table 5: max generation length",
    "lengths": "ASSUMPTION matching Seer §2.2/§6.2.2: the last 10% of requests take up to ~50% of "
    "baseline time; lengths from a few hundred tokens up to the budget (Fig. 2)",
    "acceptance": "Seer Table 2 (multi-path k=4) converted to per-token rates",
    "chunk_size": "Seer §4.2: 8K-token chunks",
    "draft_range": "Seer §4.4: thresholds per architecture, from the worker's cost (values not given: "
    "ASSUMPTION, systems._seer_draft_range); 8 per request at most (Table 2)",
}


def _seer(
    name: str,
    model: str,
    num_gpus: int,
    per_worker: int,
    prompts: int,
    group: int,
    max_tokens: int,
    median: float,
) -> Preset:
    return Preset(
        name=name,
        model=model,
        gpu="H800",
        num_gpus=num_gpus,
        gpus_per_worker=per_worker,
        num_prompts=prompts,
        group_size=group,
        prompt_tokens=1024,
        lengths=LengthDistribution(
            median_tokens=median, group_sigma=0.9, within_group_sigma=0.4, max_tokens=max_tokens
        ),
        acceptance=SEER_DRAFTERS,
        group_acceptance=SEER_GROUP_ACCEPTANCE,
        sources=dict(_SEER_SOURCES),
    )


DAS_DRAFTERS = AcceptanceModel((DrafterProfile("suffix-tree", 0.6, 5.0, cpu_draft_seconds=0.0003),))

PRESETS: dict[str, Preset] = {
    "GRPO-32B-20K": _specactor(
        "GRPO-32B-20K", 1024, 8, "SpecActor §5.1: 8,192 requests per step, batch 128 per worker"
    ),
    "DAPO-32B-20K": _specactor(
        "DAPO-32B-20K", 1024, 16, "SpecActor §5.1: 16,384 requests per step, batch 256 per worker"
    ),
    "PPO-32B-20K": _specactor("PPO-32B-20K", 4096, 1, "SpecActor §5.1: 4,096 prompts, one response each"),
    "Moonlight": _seer("Moonlight", "moonlight", 32, 1, 400, 8, 65536, 9000),
    "Qwen2-VL-72B": _seer("Qwen2-VL-72B", "qwen2-vl-72b", 128, 8, 600, 16, 40960, 6000),
    "Kimi-K2": _seer("Kimi-K2", "kimi-k2", 256, 32, 800, 8, 98304, 12000),
    "DeepScaleR-7B": Preset(
        name="DeepScaleR-7B",
        model="qwen2.5-7b",
        gpu="H100",
        num_gpus=8,
        gpus_per_worker=1,
        num_prompts=128,
        group_size=16,
        prompt_tokens=512,
        lengths=LengthDistribution(
            median_tokens=3000, group_sigma=0.7, within_group_sigma=0.5, max_tokens=16384
        ),
        acceptance=DAS_DRAFTERS,
        sources={
            "cluster": "DAS §5.1: one 8xH100 node, DeepSeek-R1-Distill-Qwen-7B",
            "batch": "DAS §5.1: 128 prompts x 16 samples, 16K max length",
            "lengths": "ASSUMPTION matching DAS §3 Fig. 1: batch collapses to a few long stragglers",
            "acceptance": "ASSUMPTION: suffix-tree drafter at T=0.6, about 2.3 tokens per round "
            "(DAS Fig. 6 shows 2-3)",
            "das_efficiency": "DAS eq. 3: the first draft is accepted at rate k_i a_i; with k_i the "
            "per-token acceptance, a_i = 1",
        },
    ),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
