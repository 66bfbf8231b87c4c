"""How much slower an engine's forward runs while another engine computes on the same machine.

    python benchmarks/forward_contention.py --processes 2 --batch 32 --context 200

Times a decode forward of the bundled policy (one torch thread, batch-invariant numerics, as `bench
--workers 2 --threads 1` runs it) in one process alone, then in `--processes` processes at once, and
prints the median forward of each and their ratio: the `contention` of `sim.prediction` (the profile was
fitted on one process alone). Measured apart from any rollout, so no dispatch's makespan enters it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def _median_forward(batch: int, context: int, seconds: float, start_at: float, out) -> None:
    import torch

    from specroll.model.runner import ModelRunner, SequenceInput
    from specroll.rollout import DEFAULT_MODEL

    torch.set_num_threads(1)
    runner = ModelRunner.from_pretrained(DEFAULT_MODEL, batch, context + 2, batch_invariant=True)
    inputs = [SequenceInput(slot, context, [2]) for slot in range(batch)]
    runner.forward(inputs)
    while time.time() < start_at:  # every process starts timing at once
        time.sleep(0.005)
    timings = []
    while time.time() < start_at + seconds:
        started = time.perf_counter()
        runner.forward(inputs)
        timings.append(time.perf_counter() - started)
    out.put(statistics.median(timings))


def measure(processes: int, batch: int, context: int, seconds: float) -> float:
    """Median forward seconds, averaged over `processes` processes timing at once."""
    queue = mp.get_context("spawn").Queue()
    start_at = time.time() + 15.0  # room for every process to load the model
    spawn = mp.get_context("spawn")
    workers = [
        spawn.Process(target=_median_forward, args=(batch, context, seconds, start_at, queue))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    medians = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    return statistics.mean(medians)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    alone = measure(1, args.batch, args.context, args.seconds)
    together = measure(args.processes, args.batch, args.context, args.seconds)
    print(
        f"batch {args.batch}, context {args.context}: alone {alone * 1e3:.2f} ms, {args.processes} at once "
        f"{together * 1e3:.2f} ms, ratio {together / alone:.3f}"
    )


if __name__ == "__main__":
    main()
