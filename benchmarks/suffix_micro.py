"""Microbenchmark: appending tokens to, and drafting from, live sequences sharing one suffix index.

Workload: `num_live` sequences grow in lockstep, one token per round; every round each sequence appends
its token and then asks for an 8-token linear draft of its own context. Tokens come from a seeded
generator that repeats motifs (as rollouts of one prompt do). Reports microseconds per appended token
and per proposal for specroll's SuffixIndex and, where ArcticInference is importable, for its
SuffixDecodingCache on the same workload (each sequence an active request in one global tree).

    python benchmarks/suffix_micro.py [--rounds 128] [--live 1 4 16 64 256] [--depths 48 24]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specroll.drafting.suffix_index import DEFAULT_MAX_DEPTH, SuffixIndex  # noqa: E402

try:
    from arctic_inference.suffix_decoding import SuffixDecodingCache
except ImportError:
    SuffixDecodingCache = None

MAX_DRAFT = 8


def token_streams(num_live: int, length: int, seed: int = 0) -> list[list[int]]:
    """Sequences stitched from a shared pool of motifs, with occasional fresh tokens."""
    rng = random.Random(seed)
    motifs = [[rng.randrange(5000) for _ in range(rng.randrange(4, 24))] for _ in range(64)]
    streams = []
    for _ in range(num_live):
        seq: list[int] = []
        while len(seq) < length:
            seq.extend(rng.choice(motifs) if rng.random() < 0.8 else [rng.randrange(5000)])
        streams.append(seq[:length])
    return streams


def bench_specroll(streams: list[list[int]], max_depth: int) -> tuple[float, float]:
    index = SuffixIndex(max_depth)
    for i in range(len(streams)):
        index.add(i)
    append_s = propose_s = 0.0
    for position in range(len(streams[0])):
        for i, seq in enumerate(streams):
            started = time.perf_counter()
            index.extend(i, (seq[position],))
            middle = time.perf_counter()
            node = index.followed_suffix(i)
            if node is not None:
                index.propose(node, MAX_DRAFT)
            propose_s += time.perf_counter() - middle
            append_s += middle - started
    return _per_op(append_s, propose_s, streams)


def bench_arctic(streams: list[list[int]]) -> tuple[float, float]:
    cache = SuffixDecodingCache(max_tree_depth=64)
    for i in range(len(streams)):
        cache.start_request(i, [])
    append_s = propose_s = 0.0
    for position in range(len(streams[0])):
        for i, seq in enumerate(streams):
            started = time.perf_counter()
            cache.add_active_response(i, [seq[position]])
            middle = time.perf_counter()
            context = seq[max(0, position + 1 - 64) : position + 1]
            cache.speculate(i, context, max_spec_tokens=MAX_DRAFT, max_spec_factor=4.0, min_token_prob=0.1)
            propose_s += time.perf_counter() - middle
            append_s += middle - started
    return _per_op(append_s, propose_s, streams)


def _per_op(append_s: float, propose_s: float, streams: list[list[int]]) -> tuple[float, float]:
    num_ops = len(streams) * len(streams[0])
    return 1e6 * append_s / num_ops, 1e6 * propose_s / num_ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=128, help="tokens appended per sequence")
    parser.add_argument("--live", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    parser.add_argument("--depths", type=int, nargs="+", default=[DEFAULT_MAX_DEPTH], help="specroll index depths")
    args = parser.parse_args()
    ours_header = " | ".join(f"specroll depth {d} append µs/token | propose µs" for d in args.depths)
    print(f"| live sequences | {ours_header} | ArcticInference append µs/token | propose µs |")
    print("|---" * (3 + 2 * len(args.depths)) + "|")
    for num_live in args.live:
        streams = token_streams(num_live, args.rounds)
        ours = [bench_specroll(streams, depth) for depth in args.depths]
        ours_text = " | ".join(f"{append:.2f} | {propose:.2f}" for append, propose in ours)
        theirs = bench_arctic(streams) if SuffixDecodingCache is not None else None
        theirs_text = f"{theirs[0]:.2f} | {theirs[1]:.2f}" if theirs else "not installed | not installed"
        print(f"| {num_live} | {ours_text} | {theirs_text} |", flush=True)


if __name__ == "__main__":
    main()
