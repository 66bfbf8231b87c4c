"""`specroll bench`: plain, speculative and hf-generate on the same workload, side by side."""

from __future__ import annotations

import argparse
import json
import platform
from dataclasses import asdict

from specroll.bench import DEFAULT_SYSTEMS, BenchRow, run_bench
from specroll.commands.rollout import add_rollout_arguments, add_worker_arguments, config_from_args


def register(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    add_rollout_arguments(parser)
    add_worker_arguments(parser)
    parser.set_defaults(num_prompts=16, n=8, max_batch_size=32)
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help="comma-separated: plain, speculative[:<policy>][/<drafter>][@<head dir>], oracle[:<policy>], "
        "plain-fast (plain with --fast-numerics), plain-eager (plain without --cuda-graphs), hf-generate, "
        "workers:<static|divided|context-aware>[+fon][/<drafter>] (over --workers engines; "
        "+fon: Fastest-of-N copies)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds of every system, interleaved; figures are medians (a noisy machine)",
    )
    parser.add_argument("--json", action="store_true", help="print one line of JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    rows = run_bench(config, [s for s in args.systems.split(",") if s], repeats=args.repeats)
    if args.json:
        print(json.dumps({"rows": [asdict(r) for r in rows]}))
    else:
        print_table(rows, args)
    return 0


def print_table(rows: list[BenchRow], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    base = {r.system: r for r in rows}
    table = Table(
        title=f"specroll bench: {args.num_prompts} prompts x {args.n}, batch {args.max_batch_size}, "
        f"max_tokens {args.max_tokens}, T={args.temperature}, seed {args.seed}"
    )
    for col in (
        "system",
        "makespan (s)",
        "output tokens",
        "tokens/s",
        "accept len",
        "forwards",
        "vs plain",
        "vs plain, paired",
        f"vs {rows[0].system}, paired",
        "vs hf-generate",
        "simulated (s)",
        "simulated at plain's level (s)",
    ):
        table.add_column(col, justify="left" if col == "system" else "right")
    for r in rows:
        table.add_row(
            r.system,
            f"{r.makespan_seconds:.2f}",
            str(r.output_tokens),
            f"{r.tokens_per_second:.1f}",
            "" if r.mean_acceptance_length is None else f"{r.mean_acceptance_length:.2f}",
            "" if r.forward_passes is None else str(r.forward_passes),
            _ratio(base.get("plain"), r),
            _paired(r),
            "" if r.paired_vs_first is None else f"{r.paired_vs_first:.2f}x",
            _ratio(base.get("hf-generate"), r),
            _predicted(r.predicted_makespan_seconds, r),
            _predicted(r.scaled_makespan_seconds, r),
        )
    table.caption = (
        f"{platform.machine()} {platform.processor() or ''}, {args.repeats} round(s): median makespan; "
        "ratios are tokens/s over the reference's; paired: median over rounds of the ratio in "
        "each round (the rounds' lowest and highest in brackets); simulated: `sim.replay` on the "
        "profile, and on the profile scaled so that plain's replay matches plain's makespan in each round"
    )
    Console().print(table)
    recorded = [f"{r.system} {r.graph_recording_seconds:.2f} s" for r in rows if r.graph_recording_seconds]
    if recorded:  # inside the makespans: a rollout records its shapes' graphs; a kept engine reuses them
        print(
            f"CUDA graphs recorded during the rollouts (median time, in the makespan): {', '.join(recorded)}"
        )


def _predicted(seconds: float | None, row: BenchRow) -> str:
    """A simulated makespan of the row's system, and its error against the measured one."""
    if seconds is None:
        return ""
    return f"{seconds:.2f} ({seconds / row.makespan_seconds - 1:+.0%})"


def _ratio(reference: BenchRow | None, row: BenchRow) -> str:
    return (
        ""
        if reference is None or reference.tokens_per_second == 0
        else f"{row.tokens_per_second / reference.tokens_per_second:.2f}x"
    )


def _paired(row: BenchRow) -> str:
    """The median paired ratio, and over several rounds their spread: on a shared machine one round's
    ratio can be far from the next's."""
    if row.paired_vs_plain is None:
        return ""
    rounds = row.paired_rounds_vs_plain
    spread = f" ({min(rounds):.2f}-{max(rounds):.2f})" if len(rounds) > 1 else ""
    return f"{row.paired_vs_plain:.2f}x{spread}"
