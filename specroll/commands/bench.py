"""`specroll bench`: plain, speculative and hf-generate on the same workload, side by side."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from dataclasses import asdict
from pathlib import Path

from specroll.bench import DEFAULT_SYSTEMS, BenchRow, run_bench
from specroll.bench_presets import PRESETS, WORKLOAD_FLAGS, resolve_workload
from specroll.bench_regret import describe, regrets
from specroll.commands.rollout import DEFAULTS, add_rollout_arguments, add_worker_arguments, config_from_args
from specroll.commands import tables
from specroll.cpu_env import cpuinfo_field
from specroll.engine.telemetry import describe_drafts
from specroll.policies.cost_model import CostModel


COLUMNS = {  # printed under `--help`; docs/cli.md says the same
    "system": "what ran (see --systems)",
    "makespan (s)": "wall time of the system's rollout: the median over rounds",
    "output tokens": "tokens generated, all requests",
    "tokens/s": "output tokens over the median makespan",
    "tokens a forward": "per request and forward: accepted drafts + 1 (1.00 without speculation)",
    "forwards": "target forwards (verification or decode steps) of the rollout",
    "vs plain": "tokens/s over plain's, from the median makespans",
    "vs plain, paired": "the median over rounds of tokens/s over plain's in the same round, with the "
    "rounds' lowest and highest (on a shared machine the figure to read)",
    "vs first, paired": "the same against the first system given, where that is not plain",
    "vs hf-generate": "tokens/s over transformers' generate on the same checkpoint",
    "tail (s)": "time spent on the last 10 % of requests: from 90 % finished to the last (median)",
    "tail share": "the tail's share of the makespan (median over rounds; `specroll.tail.tail_share`)",
    "drain share": "the share of the makespan in which the batch only shrinks: from the first finish "
    "that leaves no request waiting to the end (median over rounds)",
    "batch at 25/50/75/90 %": "the batch running at those shares of the makespan (the first round's)",
    "drafts by batch": "what the policy drafted at each batch size (1, 2-3, 4-7, ...): its most "
    "frequent draft (none, chain-K tokens or tree-N nodes) and the share of forwards it ran in",
    "simulated (s)": "the simulator's makespan for this system on these requests, priced by the "
    "device's cost profile (`specroll profile`), and its error against the measured one",
    "simulated at plain's level (s)": "the same, with the profile scaled so that plain's simulated "
    "makespan equals its measured one in each round",
    "projected (s)": "with --project-profile: this run's forwards (their shapes and acceptance as "
    "measured here) priced by that profile's device, prefills included and drafting as measured here; "
    "the host's work around each forward is not in it",
}


WORKLOAD_DEFAULTS = {  # the workload without a preset
    "model": DEFAULTS.model_dir,
    "task": DEFAULTS.task,
    "num_prompts": 16,
    "n": 8,
    "max_batch_size": 32,
    "max_tokens": DEFAULTS.max_tokens,
    "temperature": DEFAULTS.temperature,
}


def register(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its parser and set `func`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "\n".join(
        [
            "presets (--preset NAME):",
            *(f"  {name}: {preset.summary}" for name, preset in PRESETS.items()),
            "columns of the table:",
            *(f"  {k}: {v}" for k, v in COLUMNS.items()),
        ]
    )
    add_rollout_arguments(parser)
    add_worker_arguments(parser)
    parser.set_defaults(**dict.fromkeys(WORKLOAD_FLAGS))  # None: not given, so the preset's or bench's own
    parser.add_argument(
        "--preset",
        default=None,
        choices=list(PRESETS),
        metavar="NAME",
        help=f"a named workload ({', '.join(PRESETS)}; listed below): it sets --model, --task, "
        "--num-prompts, --n, --max-batch-size, --max-tokens and --temperature, and any of those given "
        "wins. Without one: 16 prompts x 8 samples at batch 32 of the rollout's defaults",
    )
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT_SYSTEMS),
        help="comma-separated: plain, speculative[:<policy>][/<drafter>][@<head dir>], oracle[:<policy>], "
        "plain-fast (plain with --fast-numerics), plain-serial (plain with --overlap off), "
        "plain-eager (plain without --cuda-graphs), hf-generate, "
        "vllm[:<ngram|suffix>] (vLLM's offline engine in `make vllm-peer`'s environment, global seed), "
        "workers:<static|divided|context-aware>[+fon][/<drafter>] (over --workers engines; "
        "+fon: Fastest-of-N copies)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds of every system, interleaved; figures are medians (a noisy machine)",
    )
    parser.add_argument(
        "--project-profile",
        type=Path,
        default=None,
        metavar="FILE",
        help="a cost profile of another device (`specroll profile`): each engine system's makespan is "
        "also shown priced by it (column `projected`)",
    )
    parser.add_argument("--json", action="store_true", help="print one line of JSON")
    parser.set_defaults(func=run)
    _resolve_presets_as_parsed(parser)


def _resolve_presets_as_parsed(parser: argparse.ArgumentParser) -> None:
    """Fill the workload from `--preset` as the flags are parsed, so that whoever reads the namespace
    (`run`, `config_from_args`) sees the workload and never the None that marks a flag not given."""
    parse_known_args = parser.parse_known_args

    def parse_with_preset(args=None, namespace=None):
        namespace, extras = parse_known_args(args, namespace)
        return apply_preset(namespace), extras

    parser.parse_known_args = parse_with_preset


def apply_preset(args: argparse.Namespace) -> argparse.Namespace:
    """The workload flags filled in from `--preset` (or bench's defaults) where not given."""
    given = {name: getattr(args, name) for name in WORKLOAD_FLAGS}
    return argparse.Namespace(**{**vars(args), **resolve_workload(given, args.preset, WORKLOAD_DEFAULTS)})


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    systems = [s for s in args.systems.split(",") if s]
    rows = run_bench(
        config,
        systems,
        repeats=args.repeats,
        on_row=_round_line(args.repeats),
        on_start=_start_line(args.repeats),
        projection=None if args.project_profile is None else CostModel.load(args.project_profile),
    )
    if args.json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "regret": [asdict(r) for r in regrets(rows)]}))
    else:
        print_table(rows, args)
    return 0


def _start_line(repeats: int):
    """A line on stderr as each system's run begins, so that a log shows what the minutes go to."""

    def show(number: int, system: str) -> None:
        what = "warm-up (one short rollout)" if number == 0 else f"round {number}/{repeats}, {system}"
        print(f"bench: {what}: running", file=sys.stderr, flush=True)

    return show


def _round_line(repeats: int):
    """A line on stderr as each system's run of a round ends: a bench runs for minutes."""

    def show(number: int, row: BenchRow) -> None:
        print(
            f"bench: round {number}/{repeats}, {row.system}: {row.makespan_seconds:.2f} s, "
            f"{row.tokens_per_second:.1f} tokens/s",
            file=sys.stderr,
            flush=True,
        )

    return show


def print_table(rows: list[BenchRow], args: argparse.Namespace) -> None:
    base = {r.system: r for r in rows}
    columns = [c for c in COLUMNS if c != "vs first, paired" or rows[0].system != "plain"]
    columns = [c for c in columns if c != "projected (s)" or args.project_profile is not None]
    preset = "" if args.preset is None else f" ({args.preset})"
    table = tables.TextTable(
        f"specroll bench{preset}: {args.num_prompts} prompts x {args.n}, batch {args.max_batch_size}, "
        f"max_tokens {args.max_tokens}, T={args.temperature}, seed {args.seed}",
        [c.replace("first", rows[0].system) for c in columns],
    )
    for r in rows:
        cells = {
            "system": r.system,
            "makespan (s)": f"{r.makespan_seconds:.2f}",
            "output tokens": str(r.output_tokens),
            "tokens/s": f"{r.tokens_per_second:.1f}",
            "tokens a forward": "" if r.mean_acceptance_length is None else f"{r.mean_acceptance_length:.2f}",
            "forwards": "" if r.forward_passes is None else f"{r.forward_passes:.0f}",
            "vs plain": _ratio(base.get("plain"), r),
            "vs plain, paired": _paired(r),
            "vs first, paired": "" if r.paired_vs_first is None else f"{r.paired_vs_first:.2f}x",
            "vs hf-generate": _ratio(base.get("hf-generate"), r),
            "tail (s)": "" if r.tail_seconds is None else f"{r.tail_seconds:.2f}",
            "tail share": _share(r.tail_share),
            "drain share": _share(r.drain_share),
            "batch at 25/50/75/90 %": "/".join(map(str, r.batch_at.values())),
            "drafts by batch": describe_drafts(r.drafts_by_batch),
            "simulated (s)": _predicted(r.predicted_makespan_seconds, r),
            "simulated at plain's level (s)": _predicted(r.scaled_makespan_seconds, r),
            "projected (s)": _seconds(r.projected_makespan_seconds),
        }
        table.add_row(*(cells[c] for c in columns))
    table.caption = (
        f"{machine_name()}, {args.repeats} round(s): median makespan; "
        "ratios are tokens/s over the reference's; columns: `specroll bench --help`"
    )
    tables.print_table(table)
    if args.project_profile is not None:
        print(_projected_by(args.project_profile))
    against_fixed = regrets(rows)
    if against_fixed:  # an adaptive policy beside fixed caps: how much of the best one's speed it kept
        print(f"against the best fixed cap, paired: {'; '.join(describe(r) for r in against_fixed)}")
    started = [f"{r.system} {r.startup_seconds:.1f} s" for r in rows if r.startup_seconds is not None]
    if started:  # outside the makespans: vLLM builds and compiles its engine, then warms it up
        print(f"vLLM start-up, outside the makespans (median): {', '.join(started)}")
    recorded = [f"{r.system} {r.graph_recording_seconds:.2f} s" for r in rows if r.graph_recording_seconds]
    if recorded:  # inside the makespans: a rollout records its shapes' graphs; a kept engine reuses them
        print(
            f"CUDA graphs recorded during the rollouts (median time, in the makespan): {', '.join(recorded)}"
        )


def _share(share: float | None) -> str:
    return "" if share is None else f"{share:.0%}"


def _seconds(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.2f}"


def _projected_by(path: Path) -> str:
    profile = CostModel.load(path)
    return (
        f"projected: each engine run's forwards priced by {path} ({profile.device}: {profile.source}); "
        "the host's work around each forward is not in it"
    )


def machine_name() -> str:
    """The architecture and the CPU's model ("x86_64, AMD EPYC 9B14"), where the system names it."""
    cpu = cpuinfo_field("model name") or platform.processor()
    return f"{platform.machine()}, {cpu}" if cpu else platform.machine()


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
