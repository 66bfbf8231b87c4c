"""A decode forward's time against the read of its weights: how close the CPU engine comes to the
memory bound of decoding.

    python benchmarks/forward_vs_weights.py                       # SmolLM2, bf16 and fp32, batch 1 and 8
    python benchmarks/forward_vs_weights.py --dtypes bfloat16 --batches 1,8,64 --threads 1

For each dtype and numerics (exact: batch-invariant, on specroll's CPU kernels for bf16 where they run
and on the probed BLAS, `--numerics`; fast: `--fast-numerics`'s) and batch, the median
time of a decode forward (one new token a row, a context of `--context` tokens) through
`ModelRunner.forward`, and the time to read the bytes the forward's linear layers read (each weight
once, the LM head's included), measured on this machine as a sum over a buffer of that size, in
rounds interleaved with the forwards. The ratio forward / read is what is reported: 1.0 would be a
forward that only streams its weights.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from specroll.model.catalog import resolve_model_dir  # noqa: E402
from specroll.model.loader import load_model  # noqa: E402
from specroll.model.runner import ModelRunner, SequenceInput  # noqa: E402
from specroll.model.transformer import Linear  # noqa: E402


def linear_bytes(runner: ModelRunner) -> int:
    """Bytes of every linear layer's weight (a tied LM head counted: a decode step reads it)."""
    linears = [m for m in runner.model.modules() if isinstance(m, Linear)]
    return sum(m.weight.numel() * m.weight.element_size() for m in linears)


def read_seconds(num_bytes: int, rounds: int) -> float:
    """Median seconds to read `num_bytes` once: a sum over an fp32 buffer of that size."""
    buffer = torch.ones(num_bytes // 4)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        buffer.sum()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def forward_seconds(runner: ModelRunner, batch: int, context: int, rounds: int) -> float:
    """Median seconds of a decode forward of `batch` rows after `context` cached tokens each."""
    for slot in range(batch):
        runner.forward([SequenceInput(slot, 0, list(range(1, context + 1)))])
    step = [SequenceInput(slot, context, [7]) for slot in range(batch)]
    runner.forward(step)  # warm-up
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        runner.forward(step)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _runner(model_dir: Path, numerics: str, slots: int, capacity: int, dtype: torch.dtype) -> ModelRunner:
    """numerics: "exact" (the default kernels), "exact-probed" (the probed BLAS) or "fast"."""
    if numerics not in ("exact", "exact-probed", "fast"):
        raise SystemExit(f"--numerics takes exact, exact-probed and fast, got {numerics!r}")
    kernels = "probed" if numerics == "exact-probed" else None
    model = load_model(model_dir, dtype=dtype)
    return ModelRunner(model, slots, capacity, batch_invariant=numerics != "fast", kernels=kernels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--numerics", default="exact,exact-probed,fast", help="exact: the default kernels")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = resolve_model_dir(args.model)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"{args.model}, {args.threads} thread(s), context {args.context}, medians of {args.rounds}")
    print("| dtype | numerics | batch | forward (ms) | weights read (ms) | forward / read |")
    print("|---|---|---:|---:|---:|---:|")
    for dtype in args.dtypes.split(","):
        for numerics in args.numerics.split(","):
            runner = _runner(model_dir, numerics, max(batches), args.context + 8, getattr(torch, dtype))
            if numerics == "exact-probed" and runner.kernels != "probed":
                continue
            numerics = f"exact ({runner.kernels})" if numerics == "exact" else numerics
            read = read_seconds(linear_bytes(runner), args.rounds)
            for batch in batches:
                forward = forward_seconds(runner, batch, args.context, args.rounds)
                print(
                    f"| {dtype} | {numerics} | {batch} | {forward * 1e3:.1f} | {read * 1e3:.1f} | "
                    f"{forward / read:.2f} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
