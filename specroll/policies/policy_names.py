"""Speculation policies by name. Imports no torch.

none, fixed-K (e.g. fixed-4), threshold, das, bandit, ladder, auto. Policies that reason about cost
take the cost model given to `make_policy`, or `DEFAULT_COST_MODEL` (the CPU shape measured here).
Adding a policy is one entry in `_FACTORIES`.
"""

from __future__ import annotations

import re
from typing import Callable

from specroll.policies.auto import AutoPolicy
from specroll.policies.bandit import BanditPolicy
from specroll.policies.base import SpeculationPolicy
from specroll.policies.cost_model import DEFAULT_COST_MODEL, Affine, DEFAULT_DRAFT_MODEL_COST, CostModel
from specroll.policies.das import DasPolicy
from specroll.policies.fixed import FixedDraftLength, NoSpeculation
from specroll.policies.ladder import DraftLadder, LadderPolicy, Rung
from specroll.policies.threshold import BatchThreshold

# profiled acceptance of each drafter, before live statistics replace the running one's
PROMPT_LOOKUP_ALPHA = 0.5
DRAFT_MODEL_ALPHA = 0.7


def default_ladder(model: CostModel) -> DraftLadder:
    """Prompt lookup (free to draft) and the draft model (D(b) as profiled, else the default's)."""
    draft_cost = model.draft_affine if model.has_draft_model else DEFAULT_DRAFT_MODEL_COST
    target = model.with_draft(Affine(0.0, 0.0))  # each rung brings its own drafting cost
    return DraftLadder(
        (Rung("prompt-lookup", PROMPT_LOOKUP_ALPHA), Rung("draft-model", DRAFT_MODEL_ALPHA, draft_cost)),
        target,
    )


_FACTORIES: dict[str, Callable[[CostModel], SpeculationPolicy]] = {
    "none": lambda model: NoSpeculation(),
    "threshold": lambda model: BatchThreshold.from_cost_model(model),
    "das": lambda model: DasPolicy(model),
    "bandit": lambda model: BanditPolicy(),
    "ladder": lambda model: LadderPolicy(default_ladder(model)),
    "auto": lambda model: AutoPolicy(model),
}
_FIXED = re.compile(r"fixed-(\d+)$")

DEFAULT_POLICY = "auto"


def known_policies() -> list[str]:
    return sorted([*_FACTORIES, "fixed-K"])


def fixed_draft_length(name: str) -> int | None:
    """K of a `fixed-K` name (e.g. 4 for fixed-4); None for any other name."""
    fixed = _FIXED.match(name)
    return int(fixed.group(1)) if fixed else None


def make_policy(name: str, cost_model: CostModel | None = None) -> SpeculationPolicy:
    k = fixed_draft_length(name)
    if k is not None:
        return FixedDraftLength(k)
    if name not in _FACTORIES:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(known_policies())}")
    return _FACTORIES[name](cost_model or DEFAULT_COST_MODEL)
