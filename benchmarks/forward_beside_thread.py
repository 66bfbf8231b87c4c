"""What a Python thread beside the target's forward costs it: the case for drafting in another process.

    python benchmarks/forward_beside_thread.py --model smollm2 --task gsm8k --num-prompts 1 --n 8 \\
        --max-batch-size 8 --max-tokens 48 --threads 1 --rounds 2

A plain rollout (`rollout`'s flags) runs three ways, alternating over `--rounds`: alone; with a second
thread of the same process indexing a suffix trie (a drafter's upkeep: pure Python) for as long as
each forward runs; and with that thread yielding Python's lock after every chunk of `--chunk` tokens.
Prints each way's median forward (`Stepper.launch`) and the tokens the thread indexed a forward.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

from specroll.commands.rollout import add_rollout_arguments, config_from_args
from specroll.drafting.suffix_index import SuffixIndex
from specroll.engine.stepper import Stepper
from specroll.rollout import run_rollout

WAYS = ("alone", "beside a thread", "beside a yielding thread")


def forwards_beside(config, way: str, chunk: int) -> tuple[float, float]:
    """(median forward seconds, tokens indexed a forward) of one rollout run `way`."""
    launch, seconds, indexed = Stepper.launch, [], [0]
    rng = random.Random(0)

    def upkeep(stop: threading.Event) -> None:
        index, sequence = SuffixIndex(), 0
        while not stop.is_set():
            index.add(sequence, [rng.randrange(500) for _ in range(chunk)])
            index.num_nodes()  # the trie catches up: the work itself
            sequence, indexed[0] = sequence + 1, indexed[0] + chunk
            if way == "beside a yielding thread":
                time.sleep(0)

    def timed(self, requests, drafted):
        stop = threading.Event()
        worker = None if way == "alone" else threading.Thread(target=upkeep, args=(stop,))
        if worker is not None:
            worker.start()
        started = time.perf_counter()
        try:
            return launch(self, requests, drafted)
        finally:
            seconds.append(time.perf_counter() - started)
            stop.set()
            if worker is not None:
                worker.join()

    Stepper.launch = timed
    try:
        run_rollout(config)
    finally:
        Stepper.launch = launch
    return statistics.median(seconds[5:] or seconds), indexed[0] / max(1, len(seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rollout_arguments(parser)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8, help="tokens the thread indexes between yields")
    args = parser.parse_args()
    args.no_progress, args.out, args.telemetry = True, None, "none"
    config = config_from_args(args, speculate="off")
    runs = {way: [] for way in WAYS}
    for _ in range(args.rounds):
        for way in WAYS:
            runs[way].append(forwards_beside(config, way, args.chunk))
    print("| way | median forward (ms), by round | tokens indexed a forward |")
    print("|---|---|---:|")
    for way, rounds in runs.items():
        figures = ", ".join(f"{s * 1e3:.1f}" for s, _ in rounds)
        print(f"| {way} | {figures} | {statistics.median(n for _, n in rounds):.0f} |")


if __name__ == "__main__":
    main()
