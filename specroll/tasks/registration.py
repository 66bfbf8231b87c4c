"""Adding a named entry (a task factory, a reward function) to a registry, with clear errors."""

from __future__ import annotations

from typing import Any, Callable


def add_entry(
    registry: dict[str, Callable[..., Any]],
    kind: str,
    name: str,
    entry: Callable[..., Any],
    usage: str,
    replace: bool,
) -> None:
    """Store `entry` as `name`; `usage` completes "<kind> <name> ..." when `entry` is not callable."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a {kind}'s name must be a non-empty string, got {name!r}")
    if not callable(entry):
        raise ValueError(f"{kind} {name!r} {usage}, got {entry!r}")
    if name in registry and not replace:
        raise ValueError(f"a {kind} named {name!r} is already registered (pass replace=True to override it)")
    registry[name] = entry
