"""The seed papers' headline comparisons, simulated over seeds and set beside the papers' ranges.

Each comparison is drawn once per seed (the preset's `seed`: its lengths, acceptance and veRL's
shuffle); its figure is the mean over the seeds, with their standard deviation and range. A check
passes (`within`) when the mean lies in the paper's range widened by 25% on each side:
[low * 0.75, high * 1.25]. Point figures ("~1.03x") have low == high.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from itertools import product
from typing import Callable, Sequence

import numpy as np

from specroll.scheduling.dispatch import DISPATCHES
from specroll.sim.rollout_metrics import RolloutMetrics
from specroll.sim.presets import Preset, get_preset
from specroll.sim.systems import SYSTEMS, SystemOptions, simulate

WIDENING = 0.25


@dataclass(frozen=True)
class Check:
    name: str
    samples: tuple[float, ...]  # (num_seeds,) the comparison at each seed
    paper_low: float
    paper_high: float
    source: str

    @property
    def simulated(self) -> float:
        return float(np.mean(self.samples))

    @property
    def spread(self) -> float:
        """Standard deviation over seeds (0 for one seed)."""
        return float(np.std(self.samples, ddof=1)) if len(self.samples) > 1 else 0.0

    @property
    def within(self) -> bool:
        return self.paper_low * (1 - WIDENING) <= self.simulated <= self.paper_high * (1 + WIDENING)

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "simulated": self.simulated,
            "spread": self.spread,
            "min": min(self.samples),
            "max": max(self.samples),
            "within": self.within,
        }


@dataclass(frozen=True)
class Comparison:
    """A check before it is drawn: its figure at one seed."""

    name: str
    figure: Callable[[int], float]  # seed -> the comparison
    paper_low: float
    paper_high: float
    source: str

    def check(self, seeds: Sequence[int]) -> Check:
        samples = tuple(self.figure(seed) for seed in seeds)
        return Check(self.name, samples, self.paper_low, self.paper_high, self.source)


@lru_cache(maxsize=None)
def run_system(preset_name: str, system: str, seed: int = 0) -> RolloutMetrics:
    preset = get_preset(preset_name).with_overrides(seed=seed)
    return simulate(preset, SYSTEMS[system])[0]


def _speedup(preset: str, system: str, over: str) -> Callable[[int], float]:
    return lambda seed: (
        run_system(preset, over, seed).makespan_seconds / run_system(preset, system, seed).makespan_seconds
    )


def _reduction(preset: str, system: str, metric: str) -> Callable[[int], float]:
    """1 - system's metric over veRL's."""
    return lambda seed: (
        1
        - getattr(run_system(preset, system, seed), metric)
        / getattr(run_system(preset, "verl", seed), metric)
    )


def _specactor_checks() -> list[Comparison]:
    checks = [
        Comparison(
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
            Comparison(
                f"SpecActor ablation DAPO-32B-20K: {system} over {over}",
                _speedup("DAPO-32B-20K", system, over),
                paper,
                paper,
                "SpecActor §5.5, Fig. 15",
            )
        )
    return checks


def _seer_checks() -> list[Comparison]:
    checks: list[Comparison] = []
    steps = (("divided", 1.27, 1.35), ("divided+context", 1.33, 1.47), ("seer", 1.77, 1.87))
    for name in ("Moonlight", "Qwen2-VL-72B", "Kimi-K2"):
        for system, low, high in steps:
            checks.append(
                Comparison(
                    f"Seer {name}: {system} throughput over veRL",
                    _speedup(name, system, "verl"),
                    low,
                    high,
                    "Seer §6.3, Table 6",
                )
            )
        reduction = _reduction(name, "seer", "tail_seconds")
        checks.append(Comparison(f"Seer {name}: tail-time reduction", reduction, 0.75, 0.93, "Seer §6.2.2"))
    return checks


def _das_checks() -> list[Comparison]:
    reduction = _reduction("DeepScaleR-7B", "das", "makespan_seconds")
    return [Comparison("DAS DeepScaleR-7B: rollout-time reduction", reduction, 0.5, 0.5, "DAS §5.1, Fig. 10")]


CHECK_FAMILIES: tuple[Callable[[], list[Comparison]], ...] = (_specactor_checks, _seer_checks, _das_checks)


def reproduce(seeds: Sequence[int] = (0,)) -> list[Check]:
    """Every comparison, drawn at each of `seeds`."""
    return [comparison.check(seeds) for family in CHECK_FAMILIES for comparison in family()]


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
