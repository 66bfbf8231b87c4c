"""Microbenchmark: appending tokens to, and drafting from, live sequences sharing one suffix index.

Workload: `num_live` sequences grow in lockstep, one token per round; every round each sequence appends
its token and, every `--propose-every` rounds (0: never), asks for an 8-token linear draft of its own
context. Tokens come from a seeded generator that repeats motifs (as rollouts of one prompt do).
Reports microseconds per appended token (time in `extend`), per proposal (time to draft, deferred
index updates included) and the total per token, for specroll's SuffixIndex and, where
ArcticInference is importable, for its SuffixDecodingCache on the same workload (each sequence an
active request in one global tree).

`--drafters` runs the engine's view instead: the live sequences are requests of one group, each
observed by grouped, history and own-context drafters behind one CombinedDrafter, as a rollout does.

    python benchmarks/suffix_micro.py [--rounds 128] [--live 1 4 16 64 256] [--depths 48 24]
        [--propose-every 1] [--drafters] [--repeats 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specroll.drafteval.replay import feed  # noqa: E402
from specroll.drafting.combined import CombinedDrafter  # noqa: E402
from specroll.drafting.grouped import GroupedDrafter  # noqa: E402
from specroll.drafting.history import HistoryDrafter  # noqa: E402
from specroll.drafting.own_context import OwnContextDrafter  # noqa: E402
from specroll.drafting.protocol import DraftQuery, RequestInfo  # noqa: E402
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


def _timed_rounds(streams: list[list[int]], propose_every: int, append, propose) -> tuple[float, float]:
    """One token a round for every live sequence: seconds spent in `append(i, token)` and in
    `propose(i, position)` (called on proposing rounds only)."""
    append_seconds = propose_seconds = 0.0
    for position in range(len(streams[0])):
        is_proposing = _is_proposing(position, propose_every)
        for i, seq in enumerate(streams):
            started = time.perf_counter()
            append(i, seq[position])
            middle = time.perf_counter()
            if is_proposing:
                propose(i, position)
            propose_seconds += time.perf_counter() - middle
            append_seconds += middle - started
    return append_seconds, propose_seconds


def bench_specroll(
    streams: list[list[int]], max_depth: int, propose_every: int
) -> tuple[float, float, float]:
    index = SuffixIndex(max_depth)
    for i in range(len(streams)):
        index.add(i)

    def propose(i: int, position: int) -> None:
        node = index.followed_suffix(i)
        if node is not None:
            index.propose(node, MAX_DRAFT)

    append_seconds, propose_seconds = _timed_rounds(
        streams, propose_every, lambda i, t: index.extend(i, (t,)), propose
    )
    return _per_op(append_seconds, propose_seconds, streams, propose_every)


def bench_drafters(
    streams: list[list[int]], max_depth: int, propose_every: int
) -> tuple[float, float, float]:
    """The live sequences as one group's requests, each observed by three drafters, one token a round;
    the history drafter holds the group's previous step (as many responses, from another seed)."""
    history = HistoryDrafter(max_depth=max_depth)
    prompt = tuple(streams[0][:16])
    for i, response in enumerate(token_streams(len(streams), len(streams[0]), seed=1)):
        feed(history, RequestInfo(-1 - i, 0, prompt), response)
    history.advance_step(1)
    drafter = CombinedDrafter(
        [GroupedDrafter(max_depth=max_depth), history, OwnContextDrafter(max_depth=max_depth)]
    )
    for i in range(len(streams)):
        drafter.begin(RequestInfo(i, 0, prompt, step=1))
    observe_seconds, propose_seconds = _timed_rounds(
        streams,
        propose_every,
        lambda i, t: drafter.observe(i, (t,)),
        lambda i, position: drafter.propose(
            [DraftQuery(i, 0, streams[i][: position + 1], len(prompt), MAX_DRAFT)]
        ),
    )
    return _per_op(observe_seconds, propose_seconds, streams, propose_every)


def _fastest(repeats: int, bench, *args) -> tuple[float, float, float]:
    """The run with the smallest total: on a shared machine the others measure the neighbours."""
    return min((bench(*args) for _ in range(repeats)), key=lambda row: row[-1])


def _is_proposing(position: int, propose_every: int) -> bool:
    return propose_every > 0 and (position + 1) % propose_every == 0


def bench_arctic(streams: list[list[int]]) -> tuple[float, float]:
    cache = SuffixDecodingCache(max_tree_depth=64)
    for i in range(len(streams)):
        cache.start_request(i, [])
    append_seconds = propose_seconds = 0.0
    for position in range(len(streams[0])):
        for i, seq in enumerate(streams):
            started = time.perf_counter()
            cache.add_active_response(i, [seq[position]])
            middle = time.perf_counter()
            context = seq[max(0, position + 1 - 64) : position + 1]
            cache.speculate(i, context, max_spec_tokens=MAX_DRAFT, max_spec_factor=4.0, min_token_prob=0.1)
            propose_seconds += time.perf_counter() - middle
            append_seconds += middle - started
    return _per_op(append_seconds, propose_seconds, streams)


def _per_op(
    append_seconds: float, propose_seconds: float, streams: list[list[int]], propose_every: int = 1
) -> tuple[float, float, float]:
    """(µs per appended token, µs per proposal, total µs per token)."""
    num_tokens = len(streams) * len(streams[0])
    num_proposals = len(streams) * (len(streams[0]) // propose_every) if propose_every > 0 else 0
    per_proposal = 1e6 * propose_seconds / num_proposals if num_proposals else 0.0
    return (
        1e6 * append_seconds / num_tokens,
        per_proposal,
        1e6 * (append_seconds + propose_seconds) / num_tokens,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=128, help="tokens appended per sequence")
    parser.add_argument("--live", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    parser.add_argument(
        "--depths", type=int, nargs="+", default=[DEFAULT_MAX_DEPTH], help="specroll index depths"
    )
    parser.add_argument("--propose-every", type=int, default=1, help="rounds between drafts (0: never draft)")
    parser.add_argument("--drafters", action="store_true", help="through the drafters, not one index")
    parser.add_argument(
        "--repeats", type=int, default=1, help="report the fastest of this many runs (noisy machines)"
    )
    args = parser.parse_args()
    with_arctic = SuffixDecodingCache is not None and not args.drafters and args.propose_every == 1
    columns = [
        f"depth {d} {what}"
        for d in args.depths
        for what in ("append µs/token", "propose µs", "total µs/token")
    ]
    columns += ["ArcticInference append µs/token", "propose µs", "total µs/token"] if with_arctic else []
    print("| live sequences | " + " | ".join(columns) + " |")
    print("|---" * (1 + len(columns)) + "|")
    bench = bench_drafters if args.drafters else bench_specroll
    for num_live in args.live:
        streams = token_streams(num_live, args.rounds)
        rows = [_fastest(args.repeats, bench, streams, depth, args.propose_every) for depth in args.depths]
        rows += [_fastest(args.repeats, bench_arctic, streams)] if with_arctic else []
        print(
            f"| {num_live} | " + " | ".join(" | ".join(f"{x:.2f}" for x in row) for row in rows) + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()
