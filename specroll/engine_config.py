"""The engine's settings as one validated value (`EngineConfig`): its limits, its numerics and where it
runs. Every caller holds this one value rather than copies of its fields: a rollout's config, the TRL
adapter's, the spec a worker builds its engine from, the drafter's context and the engine itself.
Imports no torch and sits below the drafters and the engine, so each of them can hold it."""

from __future__ import annotations

from dataclasses import dataclass, field

from specroll.placement import cache_dtype, check_placement
from specroll.sampling_rules import DEFAULT_SAMPLING_RULE, check_rule

VERIFY_MODES = ("exact", "rejection")


@dataclass(frozen=True)
class EngineConfig:
    max_batch_size: int = 256  # KV-cache slots: requests running at once (fewer where memory is short)
    max_model_len: int = 1024  # prompt + output positions per request (the factory sets it per rollout)
    max_draft: int = 8  # the most draft tokens any request verifies in one forward
    kv_budget_tokens: int | None = None  # cached positions over all running requests; None = all slots full
    max_prefill_tokens: int = 16384
    min_prefill_split: int = 1024  # padded tokens a prefill must save to be split in two forwards
    verify: str = "exact"  # rejection mode gets sampling drafters that report q
    seed: int = 0
    device: str = "cpu"  # cpu | cuda, resolved (`specroll.model.device.resolve_device`)
    dtype: str = "float32"  # float32 | bfloat16 | float16; a draft model runs in it too
    # target logits independent of batch shape (`model.batch_invariant`); the command line's
    # --fast-numerics asks for the opposite (`flag`, `inverted`: the field is its negation)
    batch_invariant: bool = field(default=True, metadata={"flag": "fast_numerics", "inverted": True})
    sampling_rule: str = DEFAULT_SAMPLING_RULE  # exact mode's draw (`specroll.sampling_rules`)
    cuda_graphs: bool = False  # decode and verification forwards at static shapes (`model.static_forward`)
    # with cuda_graphs and no drafter, launch each decode step before the previous one's tokens are
    # read back, so the host's work runs beside the device's (`Engine.iterate`); records unchanged
    overlap: bool = True

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_model_len", "max_prefill_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_draft < 0:
            raise ValueError(f"max_draft must be >= 0, got {self.max_draft}")
        if self.kv_budget_tokens is not None and self.kv_budget_tokens <= 0:
            raise ValueError(f"kv_budget_tokens must be positive, got {self.kv_budget_tokens}")
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify mode must be one of {', '.join(VERIFY_MODES)}, got {self.verify!r}")
        check_rule(self.sampling_rule)
        check_placement(self.device, self.dtype, self.batch_invariant)

    @property
    def cache_dtype(self) -> str:
        """The KV cache's dtype (`placement.cache_dtype`): what sizes its memory."""
        return cache_dtype(self.device, self.dtype, self.batch_invariant)

    @property
    def cache_capacity(self) -> int:
        """Positions per slot: the context plus room for one forward's draft and pending token."""
        return self.max_model_len + self.max_draft + 1

    @property
    def is_lossless(self) -> bool:
        """Speculation changes no token or log-probability, whatever the drafter, batch or schedule:
        exact verification under batch-invariant numerics."""
        return self.verify == "exact" and self.batch_invariant
