"""The seed papers' headline comparisons, simulated and set beside the ranges the papers report.

A check passes (`within`) when the simulated figure lies in the paper's range widened by 25% on each
side: [low * 0.75, high * 1.25]. Point figures ("~1.03x") have low == high.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from itertools import product
from typing import Callable

from specroll.scheduling.dispatch import DISPATCHES
from specroll.sim.metrics import RolloutMetrics
from specroll.sim.presets import Preset, get_preset
from specroll.sim.systems import SYSTEMS, SystemOptions, simulate

WIDENING = 0.25


@dataclass(frozen=True)
class Check:
    name: str
    simulated: float
    paper_low: float
    paper_high: float
    source: str

    @property
    def within(self) -> bool:
        return self.paper_low * (1 - WIDENING) <= self.simulated <= self.paper_high * (1 + WIDENING)

    def as_dict(self) -> dict:
        return {**asdict(self), "within": self.within}


@lru_cache(maxsize=None)
def run_system(preset_name: str, system: str) -> RolloutMetrics:
    return simulate(get_preset(preset_name), SYSTEMS[system])[0]


def _speedup(preset: str, system: str, over: str) -> float:
    return run_system(preset, over).makespan_seconds / run_system(preset, system).makespan_seconds


def _specactor_checks() -> list[Check]:
    checks = [
        Check(
            f"SpecActor {name}: rollout speedup over veRL",
            _speedup(name, "specactor", "verl"),
            2.0,
            2.4,
            "SpecActor §5.2",
        )
        for name in ("GRPO-32B-20K", "DAPO-32B-20K", "PPO-32B-20K")
    ]
    steps = (
        ("vanilla-spec", "verl", 1.026),
        ("decoupled", "vanilla-spec", 1.3),
        ("decoupled+reconfig", "decoupled", 1.2),
        ("specactor", "decoupled+reconfig", 1.2),
    )
    for system, over, paper in steps:
        checks.append(
            Check(
                f"SpecActor ablation DAPO-32B-20K: {system} over {over}",
                _speedup("DAPO-32B-20K", system, over),
                paper,
                paper,
                "SpecActor §5.5, Fig. 15",
            )
        )
    return checks


def _seer_checks() -> list[Check]:
    checks: list[Check] = []
    steps = (("divided", 1.27, 1.35), ("divided+context", 1.33, 1.47), ("seer", 1.77, 1.87))
    for name in ("Moonlight", "Qwen2-VL-72B", "Kimi-K2"):
        for system, low, high in steps:
            checks.append(
                Check(
                    f"Seer {name}: {system} throughput over veRL",
                    _speedup(name, system, "verl"),
                    low,
                    high,
                    "Seer §6.3, Table 6",
                )
            )
        reduction = 1 - run_system(name, "seer").tail_seconds / run_system(name, "verl").tail_seconds
        checks.append(Check(f"Seer {name}: tail-time reduction", reduction, 0.75, 0.93, "Seer §6.2.2"))
    return checks


def _das_checks() -> list[Check]:
    reduction = (
        1
        - run_system("DeepScaleR-7B", "das").makespan_seconds
        / run_system("DeepScaleR-7B", "verl").makespan_seconds
    )
    return [Check("DAS DeepScaleR-7B: rollout-time reduction", reduction, 0.5, 0.5, "DAS §5.1, Fig. 10")]


CHECK_FAMILIES: tuple[Callable[[], list[Check]], ...] = (_specactor_checks, _seer_checks, _das_checks)


def reproduce() -> list[Check]:
    return [check for family in CHECK_FAMILIES for check in family()]


BEST_SPECULATION = (
    dict(speculation="none"),
    dict(speculation="fixed-4"),
    dict(speculation="decoupled", reconfigure=True, fastest_of_n=True),
    dict(speculation="grouped"),
    dict(speculation="das"),
    dict(speculation="bandit"),
    dict(speculation="auto"),
)


def best_combination(preset: Preset) -> list[tuple[str, RolloutMetrics]]:
    """Every dispatch x speculation combination on one preset, fastest first."""
    results = []
    for dispatch, spec in product(DISPATCHES, BEST_SPECULATION):
        options = SystemOptions(dispatch=dispatch, **spec)
        results.append((options.label, simulate(preset, options)[0]))
    return sorted(results, key=lambda item: item[1].makespan_seconds)
