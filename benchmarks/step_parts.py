"""What each part of an engine step costs, plain beside speculative, in one process.

    python benchmarks/step_parts.py --model smollm2 --task gsm8k --num-prompts 1 --n 8 \\
        --max-batch-size 8 --max-tokens 48 --threads 1 --rounds 2
    python benchmarks/step_parts.py ... --draft-head DIR --systems plain,speculative,speculative:fixed-1

Each system runs the same workload (`rollout`'s flags) `--rounds` times, alternating. The engine's
stages are timed by wrapping them in this process (nothing in the engine is changed): the policy's
view of the batch, its decision, the drafter's proposals (its upkeep included), the forward (launch),
the verification (sampling, acceptance, log-probabilities), the commit and the observation. A
row's figures are milliseconds a decode forward (medians over rounds of the per-round means); `step`
is the whole iteration, `prefill` its prefill forwards (spread over the decode forwards), `other` what
the named parts leave of it (scheduling, the engine's own bookkeeping).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace

from specroll.commands.rollout import add_rollout_arguments, config_from_args
from specroll.engine.engine import Engine
from specroll.engine.observer import StepObserver
from specroll.engine.proposer import Proposer
from specroll.engine.stepper import Stepper
from specroll.rollout import run_rollout

PARTS = {
    "view": (Proposer, "_batch_view"),
    "propose": (Proposer, "_proposed"),
    "launch": (Stepper, "launch"),
    "verify": (Stepper, "verified"),
    "commit": (Engine, "_commit"),
    "observe": (StepObserver, "observe"),
    "prefill": (Engine, "_prefill"),
    "step": (Engine, "iterate"),
}


class Timers:
    """Seconds spent in each wrapped method, summed, while `active`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def active(self, policy_class: type):
        originals = {}
        targets = {**PARTS, "decide": (policy_class, "decide")}
        for name, (cls, method) in targets.items():
            originals[(cls, method)] = getattr(cls, method)
            setattr(cls, method, self._timed(name, getattr(cls, method)))
        try:
            yield self
        finally:
            for (cls, method), original in originals.items():
                setattr(cls, method, original)

    def _timed(self, name: str, method):
        seconds = self.seconds

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - started

        return timed


def run_system(args: argparse.Namespace, system: str) -> dict[str, float]:
    """One rollout of `system` (plain | speculative[:policy]); milliseconds a decode forward by part."""
    speculate, _, policy = system.partition(":")
    overrides = {"speculate": "off"} if speculate == "plain" else {}
    config = config_from_args(args, **overrides)
    if policy:
        config = replace(config, policy=policy)
    from specroll.policies.auto import AutoPolicy

    timers = Timers()
    with timers.active(AutoPolicy):
        result = run_rollout(config)
    forwards = max(1, len(result.telemetry))
    per_forward = {k: v * 1e3 / forwards for k, v in timers.seconds.items()}
    named = sum(v for k, v in per_forward.items() if k not in ("step", "decide"))
    per_forward["other"] = per_forward.get("step", 0.0) - named
    per_forward["forwards"] = forwards
    per_forward["tokens a forward"] = result.summary.mean_acceptance_length
    return per_forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rollout_arguments(parser)
    parser.add_argument("--systems", default="plain,speculative")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.no_progress, args.out, args.telemetry = True, None, "none"
    systems = args.systems.split(",")
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    for _ in range(args.rounds):
        for system in systems:
            runs[system].append(run_system(args, system))
    columns = ["step", "launch", "verify", "view", "decide", "propose", "commit", "observe", "prefill"]
    columns.append("other")
    print("| system | " + " | ".join(columns) + " | forwards | tokens a forward |")
    print("|---|" + "---:|" * (len(columns) + 2))
    for system, rounds in runs.items():
        cell = lambda key: statistics.median(r.get(key, 0.0) for r in rounds)  # noqa: E731
        figures = " | ".join(f"{cell(c):.2f}" for c in columns)
        print(f"| {system} | {figures} | {cell('forwards'):.0f} | {cell('tokens a forward'):.2f} |")


if __name__ == "__main__":
    main()
