"""What building a rollout engine needs, as one typed, validated value (`EngineSpec`): the engine's
settings (`EngineConfig`, validated there) and what only building it needs, the checkpoints, the
drafter, the policy and its prices. Imports no torch: the orchestrator builds it, and it travels to
worker processes, which build their engines from it (`specroll.engine.factory`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specroll.drafting.registry import known_drafters
from specroll.engine_config import EngineConfig
from specroll.model.config import ModelConfig
from specroll.policies.policy_names import DEFAULT_POLICY, make_policy

DRAFT_MODEL_DRAFTERS = ("draft-model", "ladder")  # the drafters that run a draft model


@dataclass(frozen=True)
class EngineSpec:
    model_dir: Path  # the target checkpoint, resolved
    max_tokens: int  # the longest response: with the longest prompt, it sizes the cache
    engine: EngineConfig = field(default_factory=EngineConfig)  # its max_model_len is set when built
    drafter: str | None = None  # a registered drafter's name; None: plain decoding
    draft_model_dir: Path | None = None  # for the drafters that run a draft model
    draft_head_dir: Path | None = None  # for the draft-head drafters
    policy: str = DEFAULT_POLICY
    cost_model: Path | None = None  # a `specroll profile` fit; None: the policies' default costs
    step: int = 0  # the RL training step the engine starts at
    threads: int = 0  # CPU threads for torch; 0 = auto (`engine.threads`)
    # the target's config, read once where the spec was made (`EngineChoices.spec`) and handed down;
    # None: read where it is needed. Not part of what the spec says: the checkpoint's own
    model: ModelConfig | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.threads < 0 or self.step < 0:
            raise ValueError(f"threads and step must be >= 0, got {self.threads}, {self.step}")
        if self.drafter is not None and self.drafter not in known_drafters():
            known = ", ".join(known_drafters())
            raise ValueError(f"unknown drafter {self.drafter!r}; known drafters: {known}")
        make_policy(self.policy)  # validates the name

    def target_config(self) -> ModelConfig:
        """The target's config: the one handed down with the spec, else read now."""
        if self.model is not None:
            return self.model
        from specroll.model.loader import read_config  # torch: only for a spec made without the config

        return read_config(self.model_dir)

    @property
    def runs_draft_model(self) -> bool:
        return self.drafter in DRAFT_MODEL_DRAFTERS
