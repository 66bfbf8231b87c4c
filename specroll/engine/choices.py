"""From what a user chose for an engine (a target, `--speculate`, a draft checkpoint, a draft head, a
profile) to the `EngineSpec` that builds it: the one resolution a rollout's config (`RolloutConfig`)
and the server (`specroll serve`, which has no workload) share. The target's config is read once
here and handed down in the spec (`EngineSpec.model`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specroll.drafting.head_files import HEAD_DIR_NAME, head_matches
from specroll.drafting.registry import DEFAULT_DRAFTER
from specroll.engine.spec import EngineSpec
from specroll.engine_config import EngineConfig
from specroll.model.config import ModelConfig
from specroll.model.loader import read_config
from specroll.policies.cost_model import CostModel, check_profile_device
from specroll.policies.policy_names import DEFAULT_POLICY

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
DEFAULT_DRAFT_MODEL = CHECKPOINTS / "draft"
PROFILES = CHECKPOINTS.parent / "profiles"


@dataclass(frozen=True)
class EngineChoices:
    """What was chosen for an engine, before it is resolved against the checkpoints at hand."""

    model_dir: Path
    engine: EngineConfig
    speculate: str = "on"  # off | on (the default drafter) | a drafter's name
    policy: str = DEFAULT_POLICY
    draft_model_dir: Path | None = DEFAULT_DRAFT_MODEL
    draft_head_dir: Path | None = None  # None: <model_dir>/draft-head, where `specroll head train` saves
    cost_model: Path | None = None  # a profile fit; None: one of the engine's device (`cost_model_path`)
    step: int = 0
    threads: int = 0

    @property
    def head_dir(self) -> Path:
        return Path(self.draft_head_dir or Path(self.model_dir) / HEAD_DIR_NAME)

    def spec(self, max_tokens: int, model: ModelConfig | None = None) -> EngineSpec:
        """The spec of an engine whose responses are at most `max_tokens` long; `model`: the target's
        config where the caller read it already."""
        cost_model = self.cost_model_path()  # a profile of another device is refused first, by name
        model = model or read_config(self.model_dir)
        return EngineSpec(
            model_dir=Path(self.model_dir),
            max_tokens=max_tokens,
            engine=self.engine,
            drafter=self.drafter_name(model),
            draft_model_dir=self.draft_model_dir,
            draft_head_dir=self.head_dir,
            policy=self.policy,
            cost_model=cost_model,
            step=self.step,
            threads=self.threads,
            model=model,
        )

    def drafter_name(self, model: ModelConfig) -> str | None:
        """`on` means the draft head when one was trained for this target (at temperature 1 only a
        drafter following the policy's distribution keeps up), else the draft model when a draft
        checkpoint for this target is at hand (it measured the highest acceptance on the bundled
        task), else the model-free suffix drafters."""
        if self.speculate == "on":
            if self.has_head(model):
                return "draft-head"
            return "draft-model" if self.has_matching_draft(model) else DEFAULT_DRAFTER
        return None if self.speculate == "off" else self.speculate

    def has_matching_draft(self, model: ModelConfig) -> bool:
        """A draft checkpoint exists and shares the target's vocabulary (the bundled draft is the
        bundled policy's: it cannot draft for another model, such as a pulled `smollm2`)."""
        if self.draft_model_dir is None or not (Path(self.draft_model_dir) / "config.json").is_file():
            return False
        return read_config(self.draft_model_dir).vocab_size == model.vocab_size

    def has_head(self, model: ModelConfig) -> bool:
        """A draft head for this target's hidden size and vocabulary is saved at `head_dir`."""
        return head_matches(self.head_dir, model)

    def cost_model_path(self) -> Path | None:
        """The profiled cost model for this checkpoint on the engine's device: the one given, refused
        (ValueError) if measured on another device type; else the first of
        profiles/<model>.<dtype>.cost.json and profiles/<model>.cost.json, here or beside the checkout,
        measured on this device type in this dtype or one not recorded (others are passed over); None
        without one (on the CPU the policies then use their default; elsewhere the engine measures its
        own prices, `engine.device_prices`)."""
        device, dtype = self.engine.device, self.engine.dtype
        if self.cost_model is not None:
            check_profile_device(CostModel.load(self.cost_model), device, self.cost_model)
            return Path(self.cost_model)
        model = Path(self.model_dir).resolve().name
        names = [f"{model}.{dtype}.cost.json", f"{model}.cost.json"]  # this precision's own first
        for path in (folder / name for name in names for folder in (Path("profiles"), PROFILES)):
            if path.is_file() and _prices(CostModel.load(path), device, dtype):
                return path.resolve()
        return None


def _prices(model: CostModel, device: str, dtype: str) -> bool:
    """Whether a profile prices forwards on `device` in `dtype`: measured on that device type, in that
    dtype or in one it did not record (a fit older than the field)."""
    return model.device == device and model.dtype in ("", dtype)
