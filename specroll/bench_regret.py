"""An adaptive policy's regret in a bench: its paired speed over plain against the best fixed cap's.

`auto` must choose caps at least as well as the best fixed policy it could have chosen on the same
workload. A bench that runs it beside `speculative:fixed-K` systems (the same drafter) measures that:
each system's paired ratio over plain (`BenchRow.paired_vs_plain`, the same rounds, alternated), and
the adaptive one's over the best fixed one's. 1.0 is as good as the best; below, the share of the best
fixed speed it left. Pure and torch-free: the report reads rows, it runs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, Sequence

FIXED = re.compile(r"^speculative:fixed-\d+$")


class PairedRow(Protocol):
    system: str
    paired_vs_plain: float | None


@dataclass(frozen=True)
class Regret:
    system: str  # the adaptive system ("speculative", "speculative:bandit/suffix", ...)
    best_fixed: str  # the fixed system that ran fastest beside it, with the same drafter
    vs_best: float  # its paired ratio over the best fixed one's (1.0: as good)


def regrets(rows: Sequence[PairedRow]) -> list[Regret]:
    """Each adaptive speculative system against the best fixed cap with its drafter, where both have
    a paired ratio over plain; none where the bench ran no fixed cap beside it."""
    out = []
    for row in rows:
        policy, drafter = _policy_and_drafter(row.system)
        if policy is None or FIXED.match(policy) or row.paired_vs_plain is None:
            continue
        fixed = [
            r
            for r in rows
            if r.paired_vs_plain is not None
            and _policy_and_drafter(r.system)[1] == drafter
            and FIXED.match(_policy_and_drafter(r.system)[0] or "")
        ]
        if fixed:
            best = max(fixed, key=lambda r: r.paired_vs_plain)
            out.append(Regret(row.system, best.system, row.paired_vs_plain / best.paired_vs_plain))
    return out


def _policy_and_drafter(system: str) -> tuple[str | None, str]:
    """("speculative:fixed-2", "suffix") for "speculative:fixed-2/suffix"; None for a system that is
    not the engine's speculative one (plain, vllm, workers, ...)."""
    name, _, drafter = system.partition("/")
    if name != "speculative" and not name.startswith("speculative:"):
        return None, drafter
    return name, drafter


def describe(regret: Regret) -> str:
    return f"{regret.system} {regret.vs_best:.2f} of {regret.best_fixed}"
