"""Speculation policies by name: `none`, `fixed-K` (e.g. fixed-4). Imports no torch."""

from __future__ import annotations

import re
from typing import Callable

from specroll.policies.base import SpeculationPolicy
from specroll.policies.fixed import FixedDraftLength, NoSpeculation

_FACTORIES: dict[str, Callable[[], SpeculationPolicy]] = {
    "none": NoSpeculation,
}
_FIXED = re.compile(r"fixed-(\d+)$")

DEFAULT_POLICY = "fixed-4"


def known_policies() -> list[str]:
    return sorted([*_FACTORIES, "fixed-K"])


def make_policy(name: str) -> SpeculationPolicy:
    fixed = _FIXED.match(name)
    if fixed:
        return FixedDraftLength(int(fixed.group(1)))
    if name not in _FACTORIES:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(known_policies())}")
    return _FACTORIES[name]()
