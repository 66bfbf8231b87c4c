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
from pathlib import Path
from typing import Protocol, Sequence

from specroll.bench_systems import parse_system, split_head

FIXED = re.compile(r"^fixed-\d+$")


class PairedRow(Protocol):
    system: str
    paired_vs_plain: float | None


@dataclass(frozen=True)
class Regret:
    system: str  # the adaptive system ("speculative", "speculative:bandit/suffix", ...)
    best_fixed: str  # the fixed system that ran fastest beside it, with the same drafter
    vs_best: float  # its paired ratio over the best fixed one's (1.0: as good)


def regrets(rows: Sequence[PairedRow]) -> list[Regret]:
    """Each adaptive speculative system against the best fixed cap with its drafter (and draft head),
    where both have a paired ratio over plain; none where the bench ran no fixed cap beside it."""
    speculative = [(row, _parts(row.system)) for row in rows if row.paired_vs_plain is not None]
    speculative = [(row, parts) for row, parts in speculative if parts is not None]
    out = []
    for row, (policy, drafts_with) in speculative:
        if FIXED.match(policy):
            continue
        fixed = [r for r, (p, d) in speculative if d == drafts_with and FIXED.match(p)]
        if fixed:
            best = max(fixed, key=lambda r: r.paired_vs_plain)
            out.append(Regret(row.system, best.system, row.paired_vs_plain / best.paired_vs_plain))
    return out


def _parts(system: str) -> tuple[str, tuple[str, Path | None]] | None:
    """(its policy, (its drafter, its head)) for an engine speculative system (`bench_systems`), the
    policy `auto` where none is named; None for any other system."""
    try:
        core, head = split_head(system)
        name, policy, drafter = parse_system(core)
    except ValueError:
        return None
    return (policy or "auto", (drafter, head)) if name == "speculative" else None


def describe(regret: Regret) -> str:
    return f"{regret.system} {regret.vs_best:.2f} of {regret.best_fixed}"
