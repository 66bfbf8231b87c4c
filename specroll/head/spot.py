"""What the spot trainer reports (`head.spot_process`): updates run, weights published, busy time, and
the last update's overlap per depth (TLT §4's spot trainer, trained beside the rollout).

The spot trainer once ran as a thread of the rollout's process; a thread there takes the interpreter's
lock between the engine's torch calls and slowed GRPO's rollout 1.72x (BENCHMARKS.md, "The spot
trainer in a process of its own"), so it runs in a process of its own now.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SpotStats:
    num_updates: int = 0
    num_published: int = 0
    busy_seconds: float = 0.0  # in updates, in all
    last_overlap: list[float] | None = None
