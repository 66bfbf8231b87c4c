"""What `auto` costs a forward: `decide` and `observe` timed on a draining batch, trees offered.

    python benchmarks/policy_decide.py                 # batch 1, 8 and 64; SmolLM2's bf16 profile

A forward of SmolLM2 in bf16 on one CPU thread takes 20-40 ms at batch 1-8 and 80-100 ms at 64; the
policy's arithmetic runs before every one of them, so its milliseconds are the speculative engine's
fixed cost over plain decoding.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, ForwardStats, RequestView
from specroll.policies.cost_model import CostModel

ROOT = Path(__file__).resolve().parents[1]


def milliseconds_a_decision(model: CostModel, batch_size: int, forwards: int) -> float:
    policy = AutoPolicy(model)
    finished = tuple(sorted(random.Random(0).randrange(20, 256) for _ in range(500)))
    started = time.perf_counter()
    for i in range(forwards):
        views = [
            RequestView(r, r // 8, 10 + i, 200 - i % 190, i, i // 2, i, 100 + i) for r in range(batch_size)
        ]
        batch = BatchView(views, 16, trees=True, num_waiting=0, finished_lengths=finished)
        drafts = policy.decide(batch).draft_lengths
        ids = tuple(range(batch_size))
        policy.observe(
            ForwardStats(batch_size, sum(drafts), 0, batch_size, 0.03, 0.001, ids, drafts, (0,) * batch_size)
        )
    return (time.perf_counter() - started) / forwards * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=ROOT / "profiles" / "smollm2.bfloat16.cost.json")
    parser.add_argument("--forwards", type=int, default=300)
    args = parser.parse_args()
    model = CostModel.load(args.profile)
    for batch_size in (1, 8, 64):
        cost = milliseconds_a_decision(model, batch_size, args.forwards)
        print(f"batch {batch_size}: {cost:.3f} ms a forward")


if __name__ == "__main__":
    main()
