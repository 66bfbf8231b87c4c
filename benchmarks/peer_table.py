"""The peer table: specroll's `plain`, `plain-fast` and default `speculative` against vLLM's offline
engine, plain and with its speculative methods (`vllm:ngram`, `vllm:suffix`), on SmolLM2 GSM8K at batch
1, 8 and 64, on the RL-shaped workload (8 prompts x 8 samples x 256 tokens at batch 64) and on the
bundled default model, paired over rounds.

    python benchmarks/peer_table.py                          # every workload, 2 rounds; Markdown on stdout
    python benchmarks/peer_table.py --only b8,rl --rounds 3
    python benchmarks/peer_table.py --json /tmp/peer.json    # every round's rows too
    python benchmarks/peer_table.py --rounds-of rl=1         # fewer rounds of the longest workload
    python benchmarks/peer_table.py --dtype float32          # both engines in fp32 (default: bf16)

Every system runs once a round, round after round, in one process (`specroll.bench.Bench`), so that a
ratio is the median over rounds of two systems' tokens/s measured minutes apart. vLLM runs in child
processes that keep their engines (`baselines/vllm_peer.ENGINES`): its start-up (building the engine,
compiling, a warm-up) is paid once per method and engine settings and is reported apart. The RL-shaped
workload runs before batch 64 so that batch 64 reuses its engines. A vLLM system that fails (the bundled
model's architecture, say) is dropped from later rounds and its error kept in one line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specroll.baselines.vllm_peer import ENGINES, has_method, vllm_python  # noqa: E402
from specroll.bench import Bench, BenchRow, check_system  # noqa: E402
from specroll.commands import bench as bench_command  # noqa: E402
from specroll.commands.rollout import config_from_args  # noqa: E402
from specroll.rollout import run_rollout  # noqa: E402

SPECROLL_SYSTEMS = ("plain", "plain-fast", "speculative")
VLLM_SYSTEMS = ("vllm", "vllm:ngram", "vllm:suffix")
VLLM_SPECULATIVE = VLLM_SYSTEMS[1:]


def flags(num_prompts: int, n: int, max_tokens: int, batch: int, model: str = "smollm2") -> tuple[str, ...]:
    """`bench`'s workload flags; SmolLM2 on GSM8K unless `model` is "" (the bundled default)."""
    named = ("--model", model, "--task", "gsm8k") if model else ()
    sizes = ("--num-prompts", num_prompts, "--n", n, "--max-tokens", max_tokens, "--max-batch-size", batch)
    return (*named, *map(str, sizes))


@dataclass(frozen=True)
class Workload:
    name: str
    args: tuple[str, ...]  # `bench`'s workload flags
    speculative_goal: float  # specroll speculative over vLLM's best speculative method, at least
    plain_goal: float = 1.0  # specroll plain-fast over vLLM plain, at least

    def describe(self) -> str:
        given = dict(zip(self.args[::2], self.args[1::2]))
        model = given.get("--model", "bundled default")
        return (
            f"{model}, {given['--num-prompts']} x {given['--n']}, {given['--max-tokens']} tokens, "
            f"batch {given['--max-batch-size']}"
        )


# in the order they run: rl before b64, whose engines it leaves (the same vLLM settings, longer requests)
WORKLOADS = (
    Workload("b1", flags(2, 1, 64, 1), speculative_goal=1.2),
    Workload("b8", flags(1, 8, 64, 8), speculative_goal=1.2),
    Workload("rl", flags(8, 8, 256, 64), speculative_goal=1.0),
    Workload("b64", flags(8, 8, 64, 64), speculative_goal=1.0),
    Workload("bundled", flags(8, 8, 64, 64, model=""), speculative_goal=1.0),
)


@dataclass
class Measured:
    """One workload's rows, round by round, and the vLLM systems that failed (system -> error line)."""

    workload: Workload
    rounds: list[dict[str, BenchRow]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    load_averages: list[float] = field(default_factory=list)  # 1-minute, as each round began and after

    def systems(self) -> list[str]:
        return [s for s in (*SPECROLL_SYSTEMS, *VLLM_SYSTEMS) if any(s in r for r in self.rounds)]

    def tokens_per_second(self, system: str) -> list[float]:
        return [r[system].tokens_per_second for r in self.rounds if system in r]

    def paired(self, system: str, reference: str) -> list[float]:
        """`system`'s tokens/s over `reference`'s, round by round, in the rounds that ran both."""
        return [
            r[system].tokens_per_second / r[reference].tokens_per_second
            for r in self.rounds
            if system in r and reference in r
        ]

    def best_speculative(self) -> str | None:
        """vLLM's speculative method with the higher median tokens/s here."""
        ran = [s for s in VLLM_SPECULATIVE if self.tokens_per_second(s)]
        return max(ran, key=lambda s: statistics.median(self.tokens_per_second(s)), default=None)


def measure(
    workload: Workload, rounds: int, threads: int, systems: list[str], dtype: str = "bfloat16"
) -> Measured:
    config = config_from_args(_bench_args(workload, threads, dtype))
    for system in systems:
        check_system(system, config)
    run_rollout(replace(config, num_prompts=1, n=2, max_tokens=8))  # first-call costs are no system's
    measured = Measured(workload)
    for number in range(1, rounds + 1):
        measured.load_averages.append(os.getloadavg()[0])
        bench, rows = Bench(config), {}
        for system in [s for s in systems if s not in measured.errors]:
            _log(f"{workload.name}: round {number}/{rounds}, {system}: running")
            try:
                rows[system] = bench.row(system)
            except RuntimeError as err:  # vLLM's child failed: its log is above
                measured.errors[system] = str(err).splitlines()[0]
                continue
            row = rows[system]
            _log(f"{workload.name}: round {number}/{rounds}, {system}: {row.tokens_per_second:.1f} tokens/s")
        measured.rounds.append(rows)
    measured.load_averages.append(os.getloadavg()[0])
    return measured


def _bench_args(workload: Workload, threads: int, dtype: str = "bfloat16") -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_command.register(parser)
    argv = [*workload.args, "--threads", str(threads), "--dtype", dtype]
    args = parser.parse_args(argv)
    args.argv = argv
    return args


def _log(line: str) -> None:
    print(f"peer_table: {line}", file=sys.stderr, flush=True)


def available_systems() -> list[str]:
    """specroll's systems and whichever of vLLM's this machine's environment runs."""
    if vllm_python() is None:
        return list(SPECROLL_SYSTEMS)
    return [*SPECROLL_SYSTEMS, *(s for s in VLLM_SYSTEMS if has_method(s.partition(":")[2]))]


def _ratio(values: list[float]) -> str:
    if not values:
        return ""
    median = f"{statistics.median(values):.2f}x"
    return median if len(values) == 1 else f"{median} ({min(values):.2f}-{max(values):.2f})"


def _median(values: list[float | None], digits: int) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):.{digits}f}" if known else ""


def systems_table(results: list[Measured]) -> str:
    """Markdown: every workload's systems, median tokens/s, tokens a forward, ratio to vLLM plain."""
    lines = [
        "| workload | system | tokens/s | tokens a forward | vs vLLM plain, paired | vLLM start-up (s) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for m in results:
        for system in m.systems():
            rows = [r[system] for r in m.rounds if system in r]
            startup = _median([r.startup_seconds for r in rows], 0)
            lines.append(
                f"| {m.workload.name} | {system} | {_median(m.tokens_per_second(system), 1)} | "
                f"{_median([r.mean_acceptance_length for r in rows], 2)} | "
                f"{_ratio(m.paired(system, 'vllm'))} | {startup} |"
            )
    return "\n".join(lines)


def goals_table(results: list[Measured]) -> str:
    """Markdown: specroll over vLLM, paired, against the goals."""
    lines = [
        "| workload | plain-fast / vllm | plain / vllm | speculative / vLLM's best speculative | goals met |",
        "|---|---:|---:|---:|---|",
    ]
    for m in results:
        best = m.best_speculative()
        fast = m.paired("plain-fast", "vllm")
        speculative = m.paired("speculative", best) if best else []
        lines.append(
            f"| {m.workload.name} | {_ratio(fast)} | {_ratio(m.paired('plain', 'vllm'))} | "
            f"{_ratio(speculative)}{f' ({best})' if best else ''} | {_verdict(m, fast, speculative)} |"
        )
    return "\n".join(lines)


def _verdict(m: Measured, fast: list[float], speculative: list[float]) -> str:
    goals = [
        (fast, m.workload.plain_goal, "plain-fast"),
        (speculative, m.workload.speculative_goal, "speculative"),
    ]
    said = [
        f"{name} {'yes' if statistics.median(values) >= goal else 'no'} (>= {goal:.1f}x)"
        for values, goal, name in goals
        if values
    ]
    return "; ".join(said) or "no vLLM figures"


def report(results: list[Measured], threads: int, dtype: str = "bfloat16") -> str:
    described = "\n".join(
        f"- {m.workload.name}: {m.workload.describe()}; {len(m.rounds)} round(s); 1-minute load average "
        f"{', '.join(f'{a:.2f}' for a in m.load_averages)} (as each round began, and after)"
        + "".join(f"\n  - {system} failed: {error}" for system, error in m.errors.items())
        for m in results
    )
    return (
        f"{dtype}, both engines; {threads} thread(s); medians over rounds, paired ratios with their rounds' "
        f"lowest and highest\n\n{described}\n\n{systems_table(results)}\n\n{goals_table(results)}\n"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every system, interleaved")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads, every system alike")
    parser.add_argument(
        "--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="both engines' precision"
    )
    parser.add_argument(
        "--only", default="", help=f"comma-separated workloads, of {', '.join(w.name for w in WORKLOADS)}"
    )
    parser.add_argument(
        "--rounds-of",
        action="append",
        default=[],
        metavar="NAME=K",
        help="K rounds of workload NAME instead of --rounds (repeatable)",
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="also write every round's rows here")
    args = parser.parse_args(argv)
    known = {w.name for w in WORKLOADS}
    wanted = [name for name in args.only.split(",") if name]
    rounds = dict(_named_rounds(given, parser) for given in args.rounds_of)
    if not set(wanted) | set(rounds) <= known:
        unknown = sorted((set(wanted) | set(rounds)) - known)
        parser.error(f"unknown workload(s) {unknown}; known: {sorted(known)}")
    if min([args.rounds, *rounds.values()]) < 1:
        parser.error("rounds must be >= 1")
    args.workloads = [w for w in WORKLOADS if not wanted or w.name in wanted]
    args.rounds_by_workload = {w.name: rounds.get(w.name, args.rounds) for w in args.workloads}
    return args


def _named_rounds(given: str, parser: argparse.ArgumentParser) -> tuple[str, int]:
    name, _, rounds = given.partition("=")
    if not rounds.isdigit():
        parser.error(f"--rounds-of takes NAME=K, got {given!r}")
    return name, int(rounds)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    systems = available_systems()
    results = []
    for workload in args.workloads:
        begun = time.perf_counter()
        rounds = args.rounds_by_workload[workload.name]
        results.append(measure(workload, rounds, args.threads, systems, args.dtype))
        _log(f"{workload.name}: {time.perf_counter() - begun:.0f} s")
        if args.json:
            _write_json(args.json, results)
        print(report(results, args.threads, args.dtype), file=sys.stderr, flush=True)  # so far
    ENGINES.close()
    print(report(results, args.threads, args.dtype))
    return 0


def _write_json(path: str, results: list[Measured]) -> None:
    rounds = [
        {
            "workload": m.workload.name,
            "errors": m.errors,
            "load_averages": m.load_averages,
            "rounds": [{s: asdict(r) for s, r in one.items()} for one in m.rounds],
        }
        for m in results
    ]
    with open(path, "w") as f:
        json.dump(rounds, f)


if __name__ == "__main__":
    sys.exit(main())
