"""What width costs a verification step: a step with one draft a row, and with a 4-node tree a row,
against a plain step (one token a row), each the forward, the exact-mode sampling and verification
and its one copy to the host, as the engine runs them, with the forward also timed alone.

    python benchmarks/verify_width.py --batches 8,64 --threads 1

The three steps are timed in rotation (plain, chain, tree, plain, ...) over `--steps` rounds after
`--context` cached positions a row (the cache holds zeros: the work does not depend on its values),
so a drift of the machine's speed falls on all three alike; medians are reported, and each step's
ratio to the plain one. The tree is two branches of two nodes (parents -1, -1, 0, 1).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from specroll.drafting.protocol import Draft  # noqa: E402
from specroll.engine.request import Request, SamplingParams  # noqa: E402
from specroll.engine.verifier import verify_batch  # noqa: E402
from specroll.model.catalog import resolve_model_dir  # noqa: E402
from specroll.model.runner import ModelRunner, SequenceInput  # noqa: E402

SHAPES = {  # name: (draft tokens, the draft's parents, the forward's row parents)
    "plain": ([], None, None),
    "chain-1": ([2], None, None),
    "tree-4": ([2, 3, 4, 5], [-1, -1, 0, 1], [-1, 0, 0, 1, 2]),
}


def step_parts(runner: ModelRunner, batch: int, context: int, shape: str):
    """(requests, drafts, forward inputs) of one step of `shape` for `batch` rows."""
    tokens, parents, row_parents = SHAPES[shape]
    requests = [Request(b, b, 0, (1,), SamplingParams(max_tokens=10_000)) for b in range(batch)]
    drafts = [Draft(b, list(tokens), None if parents is None else list(parents)) for b in range(batch)]
    inputs = [
        SequenceInput(b, context, [7, *tokens], row_parents, num_logits=1 + len(tokens)) for b in range(batch)
    ]
    return requests, drafts, inputs


def timed_step(runner: ModelRunner, parts) -> tuple[float, float]:
    """(the step's seconds, its forward's seconds)."""
    requests, drafts, inputs = parts
    started = time.perf_counter()
    logits = runner.forward(inputs).logits
    forwarded = time.perf_counter()
    verify_batch(requests, drafts, logits, 0, "exact")
    return time.perf_counter() - started, forwarded - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batches", default="8,64")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    runner = ModelRunner.from_pretrained(
        resolve_model_dir(args.model),
        max(batches),
        args.context + 8,
        getattr(torch, args.dtype),
        batch_invariant=True,
    )
    numerics = runner.describe_numerics()
    print(f"{args.model} {args.dtype}, {args.threads} thread(s), context {args.context}, {numerics}")
    print("| batch | step | step (ms) | forward (ms) | step / plain step | forward / plain forward |")
    print("|---:|---|---:|---:|---:|---:|")
    for batch in batches:
        parts = {shape: step_parts(runner, batch, args.context, shape) for shape in SHAPES}
        for shape in SHAPES:  # warm-up
            timed_step(runner, parts[shape])
        times = {shape: [] for shape in SHAPES}
        for _ in range(args.steps):
            for shape in SHAPES:
                times[shape].append(timed_step(runner, parts[shape]))
        medians = {s: tuple(statistics.median(t[i] for t in times[s]) for i in (0, 1)) for s in SHAPES}
        plain = medians["plain"]
        for shape, (step, forward) in medians.items():
            print(
                f"| {batch} | {shape} | {step * 1e3:.1f} | {forward * 1e3:.1f} | "
                f"{step / plain[0]:.2f} | {forward / plain[1]:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
