"""A bounded load test of `specroll serve` over loopback: every request answered exactly once, nothing
lost, through aborts and a weight update, with the server's resident memory sampled throughout.

`--requests` single-choice `/v1/completions` requests (the task's prompts x samples: the bundled
`running_sum`, 64 prompts x 8 = 512 by default, each with its own seed and `sample_index`) are sent by
`--concurrency` asyncio clients (httpx). A random `--abort-fraction` of them (seeded) are aborted at a
random time: with `--abort-mode abort_requests` (default) they stream, and once their first chunk names
the response id the client waits a uniform random time in [0, `--abort-window`] s and posts
`/abort_requests {"request_ids": [id]}`, then reads the stream to its end (its finish reason is
`abort`, or `stop`/`length` when it ended first); with `--abort-mode disconnect` the client closes the
connection at a uniform random time in [0, `--abort-window`] s after sending. Once half the requests
are answered, `/update_weights` loads a perturbed copy of the checkpoint (written first with
safetensors.torch: every tensor + `--perturb` x its std x N(0, 1)). The server's VmRSS
(/proc/PID/status) is sampled every `--rss-interval` s: at ready, after `--warmup` uncounted requests
(the baseline), during the load, right after it and after 2 s idle.

Checks: every request got exactly one answer (one final response or final stream chunk) with a finish
reason, none failed (no HTTP error, no 5xx), the server's finished counts (/metrics) add up to the
requests sent, nothing is left running or waiting, `/weight_info` moved by one, and the server exits 0
on SIGTERM.

    python benchmarks/serve_load.py                      # 512 requests, 64 clients, 10 % aborted
    python benchmarks/serve_load.py --json /tmp/load.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specroll.model.catalog import resolve_model_dir  # noqa: E402
from specroll.rollout import RolloutConfig, encode_prompts, load_problems  # noqa: E402
from specroll.tokenizer import load_tokenizer  # noqa: E402
from specroll.serve.child import ServeProcess  # noqa: E402

DEFAULTS = RolloutConfig()


def rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class RssSampler(threading.Thread):
    """VmRSS of `pid` every `interval` s, each sample tagged with the phase it was taken in."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.phase = "idle"
        self.samples: list[tuple[float, str, float]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self._halt.is_set():
            value = rss_mib(self.pid)
            if value is not None:
                self.samples.append((time.monotonic() - start, self.phase, value))
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def now(self) -> float | None:
        return rss_mib(self.pid)


def write_perturbed(model_dir: Path, out: Path, scale: float, seed: int) -> None:
    """A copy of the checkpoint with every floating tensor moved by `scale` x its std x N(0, 1)."""
    import torch
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    for path in model_dir.iterdir():
        if path.is_file() and path.suffix != ".safetensors":
            shutil.copy2(path, out / path.name)
    generator = torch.Generator().manual_seed(seed)
    for path in sorted(model_dir.glob("*.safetensors")):
        state = load_file(str(path))
        for name, tensor in state.items():
            if tensor.is_floating_point() and tensor.numel() > 1:
                noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32)
                state[name] = (tensor.float() + scale * tensor.float().std() * noise).to(tensor.dtype)
        save_file(state, str(out / path.name))


def parse_metrics(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                values[name] = float(value)
            except ValueError:
                pass
    return values


class LoadTest:
    def __init__(self, url: str, bodies: list[dict], aborted: set[int], args: argparse.Namespace) -> None:
        self.url, self.bodies, self.aborted, self.args = url, bodies, aborted, args
        self.answers: dict[int, list[dict]] = {i: [] for i in range(len(bodies))}
        self.errors: list[str] = []
        self.latencies: list[float] = []
        self.abort_calls: dict[str, int] = {}
        self.half = asyncio.Event()
        self.update: dict = {}
        self.rng = random.Random(args.seed + 1)
        self.pid: int | None = None  # the server's, to read its RSS at each quarter of the answers
        self.rss_marks: dict[str, float | None] = {}

    def answered(self, i: int, answer: dict) -> None:
        self.answers[i].append(answer)
        done = sum(1 for a in self.answers.values() if a)
        if done >= len(self.bodies) // 2:
            self.half.set()
        if self.pid is not None and done % max(1, len(self.bodies) // 4) == 0 and len(self.answers[i]) == 1:
            self.rss_marks[f"at_{done}_answered"] = rss_mib(self.pid)

    async def plain(self, client: httpx.AsyncClient, i: int) -> None:
        response = await client.post("/v1/completions", json=self.bodies[i])
        if response.status_code != 200:
            self.errors.append(f"request {i}: HTTP {response.status_code}: {response.text[:200]}")
            return
        out = response.json()
        for c in out["choices"]:
            self.answered(
                i,
                {
                    "finish_reason": c["finish_reason"],
                    "tokens": len(c.get("token_ids") or []),
                    "weight_version": c.get("weight_version"),
                    "spans_update": "weight_versions" in c,
                },
            )

    async def streamed_abort(self, client: httpx.AsyncClient, i: int) -> None:
        body = {**self.bodies[i], "stream": True}
        tokens, finals, rid, abort_task = 0, [], None, None
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                self.errors.append(
                    f"request {i}: HTTP {response.status_code}: {(await response.aread())[:200]}"
                )
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if rid is None:
                    rid = chunk["id"]
                    abort_task = asyncio.create_task(self.abort_later(client, rid))
                for c in chunk["choices"]:
                    tokens += len(c.get("token_ids") or [])
                    if c.get("finish_reason") is not None:
                        finals.append(c)
        if abort_task is not None:
            await abort_task
        for c in finals:
            answer = {"finish_reason": c["finish_reason"], "tokens": tokens, "aborted_by_client": True}
            answer |= {"weight_version": c.get("weight_version"), "spans_update": "weight_versions" in c}
            self.answered(i, answer)

    async def abort_later(self, client: httpx.AsyncClient, rid: str) -> None:
        await asyncio.sleep(self.rng.uniform(0, self.args.abort_window))
        response = await client.post("/abort_requests", json={"request_ids": [rid]})
        key = f"HTTP {response.status_code}, aborted {response.json().get('aborted')}"
        self.abort_calls[key] = self.abort_calls.get(key, 0) + 1

    async def disconnect(self, client: httpx.AsyncClient, i: int) -> None:
        try:
            await asyncio.wait_for(self.plain(client, i), self.rng.uniform(0, self.args.abort_window))
        except asyncio.TimeoutError:
            self.answered(i, {"finish_reason": "abort (client disconnected)", "tokens": 0})

    async def one(self, client: httpx.AsyncClient, i: int) -> None:
        sent = time.perf_counter()
        try:
            if i not in self.aborted:
                await self.plain(client, i)
            elif self.args.abort_mode == "disconnect":
                await self.disconnect(client, i)
            else:
                await self.streamed_abort(client, i)
        except httpx.HTTPError as err:
            self.errors.append(f"request {i}: {type(err).__name__}: {err}")
            return
        self.latencies.append(time.perf_counter() - sent)

    async def update_midway(self, client: httpx.AsyncClient, weights: Path) -> None:
        await self.half.wait()
        self.update["before"] = (await client.get("/weight_info")).json()
        start = time.perf_counter()
        response = await client.post("/update_weights", json={"update_info": {"path": str(weights)}})
        self.update["seconds"] = time.perf_counter() - start
        self.update["status"] = response.status_code
        self.update["response"] = response.json() if response.status_code == 200 else response.text[:300]
        self.update["after"] = (await client.get("/weight_info")).json()
        self.update["answered_at_update"] = sum(1 for a in self.answers.values() if a)

    async def run(self, weights: Path | None) -> float:
        queue: asyncio.Queue = asyncio.Queue()
        for i in range(len(self.bodies)):
            queue.put_nowait(i)
        limits = httpx.Limits(max_connections=self.args.concurrency + 8)
        async with httpx.AsyncClient(base_url=self.url, timeout=self.args.timeout, limits=limits) as client:

            async def worker() -> None:
                while True:
                    try:
                        i = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    await self.one(client, i)

            start = time.perf_counter()
            updater = asyncio.create_task(self.update_midway(client, weights)) if weights else None
            await asyncio.gather(*(worker() for _ in range(self.args.concurrency)))
            seconds = time.perf_counter() - start
            if updater is not None:
                await updater
        return seconds


def make_bodies(args: argparse.Namespace) -> list[dict]:
    """`--requests` single-choice bodies: the task's prompts x samples, in a seeded random order."""
    n = max(1, -(-args.requests // args.num_prompts))
    config = replace(
        DEFAULTS, model_dir=resolve_model_dir(args.model), task=args.task, num_prompts=args.num_prompts
    )
    task, problems = load_problems(config)
    tokenizer = load_tokenizer(config.model_dir)
    prompts = encode_prompts(tokenizer, task, problems)
    bodies = [
        {
            "prompt": list(ids),
            "n": 1,
            "seed": args.seed * 1_000_003 + prompt_id,
            "sample_index": s,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "stop_token_ids": list(tokenizer.stop_token_ids),
            "return_token_ids": True,
        }
        for prompt_id, ids in prompts.items()
        for s in range(n)
    ][: args.requests]
    random.Random(args.seed).shuffle(bodies)
    return bodies


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summarize(test: LoadTest, seconds: float, sampler: RssSampler, marks: dict, extra: dict) -> dict:
    counts: dict[str, int] = {}
    for answers in test.answers.values():
        for a in answers:
            counts[a["finish_reason"]] = counts.get(a["finish_reason"], 0) + 1
    per_request = [len(a) for a in test.answers.values()]
    tokens = sum(a["tokens"] for answers in test.answers.values() for a in answers)
    by_version: dict[str, int] = {}
    for answers in test.answers.values():
        for a in answers:
            key = "spans update" if a.get("spans_update") else f"version {a.get('weight_version')}"
            by_version[key] = by_version.get(key, 0) + 1
    during = [v for _, phase, v in sampler.samples if phase == "load"]
    return {
        "requests": len(test.bodies),
        "aborted_by_client": len(test.aborted),
        "answered_exactly_once": sum(1 for c in per_request if c == 1),
        "unanswered": sum(1 for c in per_request if c == 0),
        "answered_more_than_once": sum(1 for c in per_request if c > 1),
        "finish_reasons": counts,
        "errors": test.errors,
        "abort_calls": test.abort_calls,
        "answers_by_weight_version": by_version,
        "seconds": seconds,
        "output_tokens": tokens,
        "tokens_per_second": tokens / seconds,
        "p50_latency_s": statistics.median(test.latencies) if test.latencies else None,
        "p99_latency_s": percentile(test.latencies, 99) if test.latencies else None,
        "weight_update": test.update,
        "rss_mib": {
            **marks,
            "during_min": min(during) if during else None,
            "during_max": max(during) if during else None,
            "during_mean": statistics.fmean(during) if during else None,
            "samples": len(sampler.samples),
        },
        **extra,
    }


def print_summary(s: dict) -> None:
    rows = [
        ("requests sent", s["requests"]),
        (f"aborted by the client ({s['abort_mode']})", s["aborted_by_client"]),
        ("answered exactly once", s["answered_exactly_once"]),
        ("unanswered", s["unanswered"]),
        ("answered more than once", s["answered_more_than_once"]),
        *((f"finish_reason {k}", v) for k, v in sorted(s["finish_reasons"].items())),
        ("client errors (HTTP / 5xx)", len(s["errors"])),
        *((f"/abort_requests calls: {k}", v) for k, v in sorted(s["abort_calls"].items())),
        *((f"answers drawn by {k}", v) for k, v in sorted(s["answers_by_weight_version"].items())),
        ("server finished counts (/metrics, warm-up included)", s["server_finished"]),
        ("server choices submitted (/metrics requests_total)", f"{s['server_requests_total']:.0f}"),
        ("server counts = client counts + warm-up's", s["server_counts_match_client"]),
        ("server running / waiting at the end", f"{s['server_running']:.0f} / {s['server_waiting']:.0f}"),
        ("weight update HTTP status", s["weight_update"].get("status")),
        ("weight update seconds", f"{s['weight_update'].get('seconds', float('nan')):.2f}"),
        ("weight version before -> after", s["weight_versions"]),
        ("answered when the update was sent", s["weight_update"].get("answered_at_update")),
        ("total seconds", f"{s['seconds']:.1f}"),
        ("output tokens", s["output_tokens"]),
        ("output tokens/s", f"{s['tokens_per_second']:.1f}"),
        ("p50 / p99 request latency (s)", f"{s['p50_latency_s']:.2f} / {s['p99_latency_s']:.2f}"),
        *((f"RSS MiB {k}", f"{v:.1f}" if isinstance(v, float) else v) for k, v in s["rss_mib"].items()),
        ("server exit code on SIGTERM", s["exit_code"]),
        ("load average at start / end", f"{s['load_start']} / {s['load_end']}"),
        ("all checks passed", s["ok"]),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for error in s["errors"][:10]:
        print("error:", error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULTS.model_dir), help="checkpoint directory or model name")
    parser.add_argument("--task", default=DEFAULTS.task)
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--max-tokens", type=int, default=64, help="per request (64 on running_sum: both stop and length)"
    )
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--abort-fraction", type=float, default=0.10)
    parser.add_argument("--abort-mode", choices=("abort_requests", "disconnect"), default="abort_requests")
    parser.add_argument("--abort-window", type=float, default=2.0, help="aborts come within this many s")
    parser.add_argument(
        "--perturb", type=float, default=0.05, help="weight update: noise x each tensor's std"
    )
    parser.add_argument("--no-update", action="store_true", help="skip the weight update")
    parser.add_argument(
        "--warmup", type=int, default=64, help="uncounted requests before the memory baseline (0 = none)"
    )
    parser.add_argument("--rss-interval", type=float, default=0.25)
    parser.add_argument("--timeout", type=float, default=1800, help="per-request HTTP timeout (s)")
    parser.add_argument("--server-arg", action="append", default=[], help="extra `specroll serve` flag")
    parser.add_argument("--log", type=Path, default=Path("/tmp/serve_load_server.log"))
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = parser.parse_args(argv)

    bodies = make_bodies(args)
    rng = random.Random(args.seed + 2)
    aborted = set(rng.sample(range(len(bodies)), round(args.abort_fraction * len(bodies))))
    model_dir = resolve_model_dir(args.model)
    scratch = Path(tempfile.mkdtemp(prefix="serve_load_"))
    weights = None
    if not args.no_update:
        weights = scratch / "perturbed"
        write_perturbed(Path(model_dir), weights, args.perturb, args.seed)
    load_start = [round(x, 2) for x in os.getloadavg()]
    server = ServeProcess(["--model", str(model_dir), "--seed", str(args.seed), *args.server_arg], args.log)
    marks: dict[str, float | None] = {}
    warm: list[dict] = []
    warm_answers: list[list[dict]] = []
    exit_code = None
    try:
        server.wait_ready()
        sampler = RssSampler(server.process.pid, args.rss_interval)
        sampler.start()
        marks["ready"] = sampler.now()
        if args.warmup > 0:  # not counted: brings the server to its working set before the baseline
            sampler.phase = "warmup"
            warm = [{**b, "seed": b["seed"] + 7_777_777} for b in bodies[: args.warmup]]
            warm_test = LoadTest(server.url, warm, set(), args)
            asyncio.run(warm_test.run(None))
            if warm_test.errors or any(len(a) != 1 for a in warm_test.answers.values()):
                raise RuntimeError(f"warm-up failed: {warm_test.errors[:3]}")
            warm_answers = list(warm_test.answers.values())
            marks["after_warmup"] = sampler.now()
        test = LoadTest(server.url, bodies, aborted, args)
        test.pid = server.process.pid
        sampler.phase = "load"
        seconds = asyncio.run(test.run(weights))
        sampler.phase = "after"
        marks.update(test.rss_marks)
        marks["after_load"] = sampler.now()
        time.sleep(2.0)
        marks["after_2s_idle"] = sampler.now()
        metrics = parse_metrics(httpx.get(server.url + "/metrics", timeout=10).text)
        sampler.stop()
    finally:
        exit_code = server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    finished = {
        k.split('reason="')[1].split('"')[0]: int(v)
        for k, v in metrics.items()
        if k.startswith("specroll_requests_finished_total{")
    }
    versions = (
        test.update.get("before", {}).get("weight_version"),
        test.update.get("after", {}).get("weight_version"),
    )
    extra = {
        "abort_mode": args.abort_mode,
        "server_finished": finished,
        "server_requests_total": metrics.get("specroll_requests_total", float("nan")),
        "server_running": metrics.get("specroll_requests_running", float("nan")),
        "server_waiting": metrics.get("specroll_requests_waiting", float("nan")),
        "weight_versions": versions,
        "exit_code": exit_code,
        "load_start": load_start,
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "rss_samples": sampler.samples,
    }
    summary = summarize(test, seconds, sampler, marks, extra)
    expected = dict(summary["finish_reasons"])  # the server's counts: the client's plus the warm-up's
    for answers in warm_answers:
        for a in answers:
            expected[a["finish_reason"]] = expected.get(a["finish_reason"], 0) + 1
    summary["server_counts_match_client"] = finished == expected
    ok = (
        summary["answered_exactly_once"] == len(bodies)
        and not summary["errors"]
        and sum(finished.values()) == extra["server_requests_total"]
        and (args.abort_mode == "disconnect" or sum(finished.values()) == len(bodies) + len(warm))
        and (args.abort_mode == "disconnect" or finished == expected)
        and summary["server_running"] == 0
        and summary["server_waiting"] == 0
        and exit_code == 0
        and (args.no_update or (test.update.get("status") == 200 and versions[0] != versions[1]))
    )
    summary["ok"] = ok
    print_summary(summary)
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
