"""Served against in-process: one workload through `specroll serve` over loopback and through
`specroll.rollout.run_rollout` in this process, with the same model, seed, sampling and engine settings.

The workload is a registered task's prompts x n samples (default: the bundled `running_sum`, 64 x 8, at
`specroll rollout`'s default max tokens and temperature). The served side sends each prompt as one
`/v1/completions` request with `n` choices (token-id prompt, the tokenizer's stop ids, a fixed seed per
prompt) from `--concurrency` asyncio clients (httpx) at once; its tokens/s is completion tokens over
the wall time from the first request sent to the last response read. The in-process side is the
rollout's own makespan and output tokens (the engine built before the clock starts, as the server's
is). Each round runs served (speculation as `--speculate`), in-process, then served by a second server
with speculation off (unless `--no-off`), so every figure has its pair measured minutes apart; both
servers load at the start and an idle one takes next to no CPU.

    python benchmarks/serve_throughput.py                       # bundled 64 x 8, 2 rounds
    python benchmarks/serve_throughput.py --model smollm2 --task gsm8k --num-prompts 16 \\
        --max-tokens 256 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specroll.rollout import (  # noqa: E402
    RolloutConfig,
    encode_prompts,
    load_problems,
    run_rollout,
)
from specroll.model.catalog import resolve_model_dir  # noqa: E402
from specroll.tokenizer import load_tokenizer  # noqa: E402
from specroll.serve.child import ServeProcess  # noqa: E402

DEFAULTS = RolloutConfig()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def served_round(url: str, bodies: list[dict], concurrency: int, timeout: float) -> dict:
    """Send every body to /v1/completions from `concurrency` clients; tokens/s and latencies."""
    queue: asyncio.Queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    latencies: list[float] = []
    tokens, choices, errors = 0, 0, []
    finish: dict[str, int] = {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:

        async def worker() -> None:
            nonlocal tokens, choices
            while True:
                try:
                    body = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                sent = time.perf_counter()
                try:
                    response = await client.post("/v1/completions", json=body)
                except httpx.HTTPError as err:
                    errors.append(f"{type(err).__name__}: {err}")
                    continue
                latencies.append(time.perf_counter() - sent)
                if response.status_code != 200:
                    errors.append(f"{response.status_code}: {response.text[:200]}")
                    continue
                out = response.json()
                tokens += out["usage"]["completion_tokens"]
                for c in out["choices"]:
                    choices += 1
                    finish[c["finish_reason"]] = finish.get(c["finish_reason"], 0) + 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_second": tokens / seconds,
        "choices": choices,
        "requests": len(latencies),
        "p50_latency_s": percentile(latencies, 50) if latencies else None,
        "p99_latency_s": percentile(latencies, 99) if latencies else None,
        "finish_reasons": finish,
        "errors": errors,
    }


def inprocess_round(config: RolloutConfig) -> dict:
    result = run_rollout(config)
    s = result.summary
    tokens = sum(len(r.token_ids) for r in result.records)
    finish: dict[str, int] = {}
    for r in result.records:
        finish[str(r.finish_reason)] = finish.get(str(r.finish_reason), 0) + 1
    return {
        "seconds": s.makespan_seconds,
        "tokens": tokens,
        "tokens_per_second": tokens / s.makespan_seconds,
        "choices": len(result.records),
        "mean_acceptance_length": s.mean_acceptance_length,
        "finish_reasons": finish,
    }


def make_bodies(config: RolloutConfig, split: bool) -> tuple[list[dict], int]:
    """The rollout's prompts as /v1/completions bodies (one with n choices a prompt, or n with one
    each when `split`), and the longest prompt's length."""
    task, problems = load_problems(config)
    tokenizer = load_tokenizer(config.model_dir)
    prompts = encode_prompts(tokenizer, task, problems)
    common = {
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k,
        "stop_token_ids": list(tokenizer.stop_token_ids),
    }
    bodies = []
    for prompt_id, ids in prompts.items():
        seed = config.engine.seed * 1_000_003 + prompt_id
        if split:
            for s in range(config.n):
                bodies.append({"prompt": list(ids), "n": 1, "seed": seed, "sample_index": s, **common})
        else:
            bodies.append({"prompt": list(ids), "n": config.n, "seed": seed, **common})
    return bodies, max(map(len, prompts.values()))


def server_args(config: RolloutConfig, args: argparse.Namespace, longest: int, speculate: str) -> list[str]:
    """The rollout's engine settings as `specroll serve` flags; the context is the rollout engine's
    (longest prompt + max tokens), so both caches are the same size."""
    engine = config.engine
    out = [
        "--model", str(config.model_dir),
        "--seed", str(engine.seed),
        "--speculate", speculate,
        "--policy", config.policy,
        "--verify", engine.verify,
        "--max-batch-size", str(engine.max_batch_size),
        "--max-draft", str(engine.max_draft),
        "--threads", str(config.threads),
        "--device", engine.device,
        "--dtype", engine.dtype,
        "--max-model-len", str(longest + config.max_tokens),
        "--max-tokens", str(config.max_tokens),
        "--max-n", str(max(config.n, 1)),
    ]  # fmt: skip
    if args.fast_numerics:
        out.append("--fast-numerics")
    return out


def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_tables(report: dict) -> None:
    rows, off_rounds = report["rounds"], report["speculation_off_rounds"]
    print()
    cols = ["round", "served tok/s", "in-proc tok/s", "ratio", "served tok", "in-proc tok", "p50 s", "p99 s"]
    print(" ".join(f"{c:>13}" for c in cols), " errors")
    for r in rows:
        s, loc = r["served"], r["in_process"]
        cells = [r["round"], fmt(s["tokens_per_second"]), fmt(loc["tokens_per_second"]), fmt(r["ratio"], 3)]
        cells += [s["tokens"], loc["tokens"], fmt(s["p50_latency_s"], 2), fmt(s["p99_latency_s"], 2)]
        print(" ".join(f"{c:>13}" for c in cells), f" {len(s['errors'])}")
    median = report["median_ratio"]
    cells = ["median", fmt(report["median_served_tps"]), fmt(report["median_in_process_tps"]), fmt(median, 3)]
    print(" ".join(f"{c:>13}" for c in cells), f"  target >= 0.95: {'met' if median >= 0.95 else 'NOT met'}")
    if off_rounds:
        print()
        cols = ["speculation", "served tok/s", "p50 s", "p99 s", "tokens"]
        print(" ".join(f"{c:>13}" for c in cols))
        named = [(f"on r{r['round']}", r["served"]) for r in rows]
        named += [(f"off r{i + 1}", s) for i, s in enumerate(off_rounds)]
        for name, s in named:
            cells = [
                name,
                fmt(s["tokens_per_second"]),
                fmt(s["p50_latency_s"], 2),
                fmt(s["p99_latency_s"], 2),
            ]
            print(" ".join(f"{c:>13}" for c in [*cells, s["tokens"]]))
        pairs = [r["served"]["tokens_per_second"] / o["tokens_per_second"] for r, o in zip(rows, off_rounds)]
        report["on_off_ratios"] = pairs
        print(
            f"speculation on / off through the server, per round: {', '.join(f'{x:.3f}' for x in pairs)}; "
            f"median {statistics.median(pairs):.3f}"
        )
    print(f"server exit codes on SIGTERM: {report['server_exit_codes']}")
    print(f"load average (1, 5, 15 min) at start {report['uptime_start']}, at end {report['uptime_end']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULTS.model_dir), help="checkpoint directory or model name")
    parser.add_argument("--task", default=DEFAULTS.task)
    parser.add_argument("--num-prompts", type=int, default=DEFAULTS.num_prompts)
    parser.add_argument("--n", type=int, default=DEFAULTS.n, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=DEFAULTS.max_tokens)
    parser.add_argument("--temperature", type=float, default=DEFAULTS.temperature)
    parser.add_argument("--seed", type=int, default=DEFAULTS.engine.seed)
    parser.add_argument("--threads", type=int, default=DEFAULTS.threads, help="CPU threads (0 = auto)")
    parser.add_argument("--max-batch-size", type=int, default=DEFAULTS.engine.max_batch_size)
    parser.add_argument(
        "--speculate", default="on", help="the speculation of both sides (on | off | a drafter)"
    )
    parser.add_argument("--fast-numerics", action="store_true")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent HTTP clients")
    parser.add_argument(
        "--split", action="store_true", help="send n requests of one choice a prompt, not one with n"
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each side (alternating)")
    parser.add_argument(
        "--no-off", action="store_true", help="skip the served round with speculation off in each round"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="per-request HTTP timeout (s)")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"), help="where the servers' logs go")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    args = parser.parse_args(argv)

    flags = "task num_prompts n max_tokens temperature threads speculate seed max_batch_size".split()
    config = RolloutConfig.from_flat(
        DEFAULTS.as_flat()
        | {name: getattr(args, name) for name in flags}
        | {"model_dir": resolve_model_dir(args.model), "batch_invariant": not args.fast_numerics}
    )
    bodies, longest = make_bodies(config, args.split)
    shape = f"{len(bodies)} requests x n={bodies[0]['n']}"
    workload = f"{config.task} {config.num_prompts} x {config.n} ({shape})"
    sampling = f"max_tokens {config.max_tokens}, temperature {config.temperature}, seed {config.engine.seed}"
    print(f"workload: {workload}, {sampling}, longest prompt {longest}", flush=True)

    report: dict = {
        "config": {**vars(args), "log_dir": str(args.log_dir), "json": str(args.json)},
        "rounds": [],
    }
    report["uptime_start"] = [round(x, 2) for x in os.getloadavg()]
    on = server_args(config, args, longest, args.speculate)
    servers = [ServeProcess(on, args.log_dir / "serve_on.log")]
    if not args.no_off:  # both load together; an idle server takes next to no CPU
        off = server_args(config, args, longest, "off")
        servers.append(ServeProcess(off, args.log_dir / "serve_off.log"))
    codes, off_rounds = [], []
    try:
        for server in servers:
            server.wait_ready()
        for i in range(args.rounds):
            served = asyncio.run(served_round(servers[0].url, bodies, args.concurrency, args.timeout))
            errors = f", {len(served['errors'])} errors" if served["errors"] else ""
            print(f"round {i + 1} served: {served['tokens_per_second']:.1f} tok/s{errors}", flush=True)
            local = inprocess_round(config)
            print(f"round {i + 1} in-process: {local['tokens_per_second']:.1f} tok/s", flush=True)
            ratio = served["tokens_per_second"] / local["tokens_per_second"]
            report["rounds"].append({"round": i + 1, "served": served, "in_process": local, "ratio": ratio})
            if not args.no_off:
                off_rounds.append(
                    asyncio.run(served_round(servers[1].url, bodies, args.concurrency, args.timeout))
                )
                tps = off_rounds[-1]["tokens_per_second"]
                print(f"round {i + 1} served, speculation off: {tps:.1f} tok/s", flush=True)
    finally:
        codes = [server.stop() for server in servers]
    report["speculation_off_rounds"] = off_rounds
    report["server_exit_codes"] = codes
    report["uptime_end"] = [round(x, 2) for x in os.getloadavg()]

    rows = report["rounds"]
    ratios = [r["ratio"] for r in rows]
    report["median_ratio"] = statistics.median(ratios) if ratios else None
    report["median_served_tps"] = statistics.median(r["served"]["tokens_per_second"] for r in rows)
    report["median_in_process_tps"] = statistics.median(r["in_process"]["tokens_per_second"] for r in rows)
    if off_rounds:
        report["median_off_tps"] = statistics.median(r["tokens_per_second"] for r in off_rounds)

    print_tables(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    failed = any(r["served"]["errors"] for r in rows) or any(r["errors"] for r in off_rounds)
    return 1 if failed or any(c != 0 for c in codes) else 0


if __name__ == "__main__":
    sys.exit(main())
