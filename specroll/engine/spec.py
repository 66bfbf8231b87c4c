"""What building a rollout engine needs, as one typed, validated value (`EngineSpec`). Imports no
torch: the orchestrator builds it, and it travels to worker processes, which build their engines from
it (`specroll.engine.factory`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specroll.drafting.registry import known_drafters
from specroll.engine.config import VERIFY_MODES
from specroll.placement import check_placement
from specroll.policies.registry import DEFAULT_POLICY, make_policy
from specroll.sampling_rules import DEFAULT_SAMPLING_RULE, check_rule

DRAFT_MODEL_DRAFTERS = ("draft-model", "ladder")  # the drafters that run a draft model


@dataclass(frozen=True)
class EngineSpec:
    model_dir: Path  # the target checkpoint, resolved
    max_tokens: int  # the longest response: with the longest prompt, it sizes the cache
    max_batch_size: int = 256
    max_draft: int = 8
    verify: str = "exact"
    seed: int = 0
    batch_invariant: bool = True  # target logits independent of batch shape (`model.batch_invariant`)
    drafter: str | None = None  # a registered drafter's name; None: plain decoding
    draft_model_dir: Path | None = None  # for the drafters that run a draft model
    draft_head_dir: Path | None = None  # for the draft-head drafters
    policy: str = DEFAULT_POLICY
    cost_model: Path | None = None  # a `specroll profile` fit; None: the policies' default costs
    step: int = 0  # the RL training step the engine starts at
    threads: int = 0  # CPU threads for torch; 0 = auto (`factory.cpu_threads`)
    device: str = "cpu"  # cpu | cuda, resolved (`specroll.model.device.resolve_device`)
    dtype: str = "float32"  # float32 | bfloat16 | float16
    sampling_rule: str = DEFAULT_SAMPLING_RULE  # exact mode's draw (`specroll.sampling_rules`)
    cuda_graphs: bool = False  # decode and verification forwards replayed as CUDA graphs (eager on the CPU)

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_batch_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_draft < 0 or self.threads < 0 or self.step < 0:
            raise ValueError(
                f"max_draft, threads and step must be >= 0, got {self.max_draft}, {self.threads}, {self.step}"
            )
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify mode must be one of {', '.join(VERIFY_MODES)}, got {self.verify!r}")
        if self.drafter is not None and self.drafter not in known_drafters():
            known = ", ".join(known_drafters())
            raise ValueError(f"unknown drafter {self.drafter!r}; known drafters: {known}")
        make_policy(self.policy)  # validates the name
        check_rule(self.sampling_rule)
        check_placement(self.device, self.dtype, self.batch_invariant)

    @property
    def runs_draft_model(self) -> bool:
        return self.drafter in DRAFT_MODEL_DRAFTERS
