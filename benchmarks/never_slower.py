"""The never-slower matrix: plain against the default speculative system in every cell, paired over
rounds (`specroll bench`), and `train` with speculation on and off, interleaved.

    python benchmarks/never_slower.py                       # every cell; a Markdown table on stdout
    python benchmarks/never_slower.py --only bundled        # cells whose name holds "bundled"
    python benchmarks/never_slower.py --beside-load         # the same beside a competing process

Cells: the bundled default and SmolLM2 (`suffix` drafting: no head in a fresh cache; with
`--head DIR`, SmolLM2 with that draft head too) at batch 1, 8, 64 and 128, each with a queue (twice
as many requests as slots: a slot freed is refilled) and without (as many requests as slots: the
batch drains from the first forward, as in `train`). A cell's figure is `bench`'s paired median of
speculative over plain tokens/s. `--beside-load` runs `benchmarks/matmul_load.py` for the whole
matrix and adds a cell of threads: SmolLM2 at 16 x 4 x 128 with the automatic thread count against
each fixed one. `--smollm2-train-rounds N` adds N interleaved pairs of `train` on SmolLM2 with the draft
head born with the run (`--online-head` on a model without a head) against `--speculate off`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECROLL = [sys.executable, "-m", "specroll.cli"]
BATCHES = (1, 8, 64, 128)


@dataclass(frozen=True)
class Cell:
    name: str
    args: tuple[str, ...]  # the workload, as `bench` flags
    systems: str = "plain,speculative"


def workload_cells(head: str | None) -> list[Cell]:
    models = [("bundled", (), 128), ("smollm2", ("--model", "smollm2", "--task", "gsm8k"), 48)]
    if head:
        models.append(("smollm2+head", ("--model", "smollm2", "--task", "gsm8k", "--draft-head", head), 48))
    cells = []
    for name, flags, max_tokens in models:
        for batch in BATCHES:
            for queue in (False, True):
                requests = batch * (2 if queue else 1)
                n = min(requests, 8)
                shape = ("--num-prompts", str(requests // n), "--n", str(n), "--max-batch-size", str(batch))
                label = f"{name}, batch {batch}, {'queue' if queue else 'drains'}"
                cells.append(Cell(label, (*flags, *shape, "--max-tokens", str(max_tokens))))
    return cells


def bench(cell: Cell, repeats: int, threads: str | None = None) -> dict:
    command = [*SPECROLL, "bench", *cell.args, "--systems", cell.systems, "--repeats", str(repeats), "--json"]
    command += [] if threads is None or "--threads" in cell.args else ["--threads", threads]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{cell.name}: {done.stderr[-2000:]}")
    rows = json.loads(done.stdout.strip().splitlines()[-1])["rows"]
    return {row["system"]: row for row in rows}


BUNDLED_TRAIN = ("--steps", "3", "--num-prompts", "16", "--n", "8", "--seed", "5151")
# SmolLM2 on GSM8K with a draft head born with the run and trained online from its first step
SMOLLM2_TRAIN = (
    *("--model", "smollm2", "--task", "gsm8k", "--steps", "4", "--num-prompts", "4", "--n", "8"),
    *("--max-tokens", "128", "--seed", "5151", "--online-head"),
)


def train_rollout_seconds(flags: tuple[str, ...], speculate: str, out: Path) -> float:
    if speculate == "off":
        flags = tuple(f for f in flags if f != "--online-head")  # no drafter, no head to train
    command = [*SPECROLL, "train", *flags, "--speculate", speculate, "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"train --speculate {speculate}: {done.stderr[-2000:]}")
    print(f"<!-- train {' '.join(flags)} --speculate {speculate}:\n{done.stdout.strip()}\n-->", flush=True)
    return sum(float(s) for s in re.findall(r"rollout ([0-9.]+)s", done.stdout))


def train_ratio(flags: tuple[str, ...], rounds: int, scratch: Path) -> tuple[float, list[float]]:
    """Rollout seconds with speculation over without, per interleaved pair, and their median."""
    scratch.mkdir(parents=True, exist_ok=True)
    runs = Path(tempfile.mkdtemp(prefix="train-", dir=scratch))  # `train` refuses a folder holding a run
    ratios = []
    for i in range(rounds):
        on = train_rollout_seconds(flags, "on", runs / f"on-{i}")
        off = train_rollout_seconds(flags, "off", runs / f"off-{i}")
        ratios.append(on / off)
    return statistics.median(ratios), ratios


def thread_cells() -> list[Cell]:
    shape = (
        "--model",
        "smollm2",
        "--task",
        "gsm8k",
        "--num-prompts",
        "16",
        "--n",
        "4",
        "--max-tokens",
        "128",
    )
    return [
        Cell(f"smollm2 16 x 4 x 128, threads {t or 'auto'}", (*shape, "--threads", str(t)), "plain")
        for t in (0, 1, 2)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="run the cells whose name holds this")
    parser.add_argument(
        "--threads",
        default=None,
        help="the cells' engine threads (default: the automatic count, probed by each system's engine)",
    )
    parser.add_argument("--head", default=None, help="a SmolLM2 draft head's directory: its cells too")
    parser.add_argument("--beside-load", action="store_true", help="run beside benchmarks/matmul_load.py")
    parser.add_argument("--train-rounds", type=int, default=3, help="train on/off pairs (0: none)")
    parser.add_argument(
        "--smollm2-train-rounds", type=int, default=0, help="SmolLM2 train on/off pairs, head born online"
    )
    parser.add_argument("--scratch", type=Path, default=ROOT / "runs" / "never-slower")
    args = parser.parse_args()
    load = None
    if args.beside_load:
        load = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "matmul_load.py"), "--seconds", "7200"]
        )
        time.sleep(3)
    try:
        run_matrix(args)
    finally:
        if load is not None:
            load.kill()


def run_matrix(args: argparse.Namespace) -> None:
    print(
        "| cell | plain tokens/s | speculative tokens/s | tokens a forward | speculative / plain (rounds) |"
    )
    print("|---|---:|---:|---:|---:|")
    for cell in [c for c in workload_cells(args.head) if args.only in c.name]:
        rows = bench(cell, args.repeats, args.threads)
        plain, spec = rows["plain"], rows["speculative"]
        rounds = ", ".join(f"{r:.2f}" for r in spec["paired_rounds_vs_plain"])
        print(
            f"| {cell.name} | {plain['tokens_per_second']:.1f} | {spec['tokens_per_second']:.1f} | "
            f"{spec['mean_acceptance_length']:.2f} | {spec['paired_vs_plain']:.2f}x ({rounds}) |",
            flush=True,
        )
    trains = (
        ("train, bundled, 3 steps x 16 x 8: rollout seconds, on / off", BUNDLED_TRAIN, args.train_rounds),
        (
            "train, smollm2, head born online, 4 steps x 4 x 8 x 128: rollout seconds, on / off",
            SMOLLM2_TRAIN,
            args.smollm2_train_rounds,
        ),
    )
    for label, flags, rounds in trains:
        if rounds and args.only in label:
            median, ratios = train_ratio(flags, rounds, args.scratch)
            print(f"| {label} | | | | {median:.2f}x ({', '.join(f'{r:.2f}' for r in ratios)}) |", flush=True)
    if args.beside_load:
        for cell in thread_cells():
            plain = bench(cell, args.repeats)["plain"]
            print(
                f"| {cell.name} (beside a matmul loop) | {plain['tokens_per_second']:.1f} | | | |", flush=True
            )


if __name__ == "__main__":
    main()
