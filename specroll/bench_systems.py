"""The names of `specroll bench`'s systems: `name[:policy][/drafter][@head]`, parsed in one place for
the bench that runs them and the reports that read its rows (`bench_regret`). Torch-free."""

from __future__ import annotations

from pathlib import Path

from specroll.baselines.vllm_peer import METHODS
from specroll.scheduling.dispatch import DISPATCHES


def parse_system(system: str) -> tuple[str, str, str]:
    """`name[:policy][/drafter]` -> (name, policy, drafter), '' where not given."""
    head, _, drafter = system.partition("/")
    name, _, policy = head.partition(":")
    allowed = {
        "plain": (),
        "plain-fast": (),
        "plain-eager": (),
        "plain-serial": (),
        "hf-generate": (),
        "vllm": ("policy",),
        "oracle": ("policy",),
        "speculative": ("policy", "drafter"),
        "workers": ("policy", "drafter"),
    }
    given = [option for option, value in (("policy", policy), ("drafter", drafter)) if value]
    if (
        name not in allowed
        or not set(given) <= set(allowed[name])
        or (name == "workers" and policy.removesuffix("+fon") not in DISPATCHES)
        or (name == "vllm" and policy and policy not in METHODS)
    ):
        raise ValueError(
            f"unknown system {system!r}; known: plain, speculative[:<policy>][/<drafter>], "
            "oracle[:<policy>], plain-fast, plain-serial, plain-eager, hf-generate, "
            f"vllm[:<{'|'.join(METHODS)}>], "
            f"workers:<{'|'.join(DISPATCHES)}>[+fon][/<drafter>]"
        )
    return name, policy, drafter


def split_head(system: str) -> tuple[str, Path | None]:
    """`speculative...@<head dir>` -> (`speculative...`, the head's directory); None where not given."""
    core, at, head = system.partition("@")
    if not at:
        return system, None
    if parse_system(core)[0] != "speculative" or not head:
        raise ValueError(f"system {system!r}: only speculative systems name a draft head, as speculative@DIR")
    return core, Path(head)
