"""Drives a running `specroll serve` with prime-rl's own rollout client (`renderers.client.generate`, PyPI
`renderers`), the way prime-rl's orchestrator does, and writes what it saw as JSON for
tests/serve/test_prime_rl_client.py to judge.

Runs under the environment that scripts/prime_client_env.sh builds (.venv-prime: renderers and its
dependencies, no torch), so it imports nothing from specroll. The prompts go in as token ids (`prompt_ids`,
as prime-rl's multi-turn bridge sends them), so the renderer needs no chat template: a minimal one gives
the stop tokens and leaves parsing out. The weight update is the orchestrator's filesystem path
(`prime_rl/orchestrator/client.py`): POST /pause?mode=keep&clear_cache=false, POST /update_weights
{"weight_dir", "mode": "full"}, POST /resume. Usage:

    .venv-prime/bin/python tests/serve/clients/prime_check.py --url URL --model NAME \
        --prompts '[[ids...], ...]' --seeds '[s, ...]' --stop-ids '[eos]' --weights-dir DIR --out report.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import traceback

import httpx
from openai import AsyncOpenAI
from renderers.base import ParsedResponse
from renderers.client import generate


class TokenRenderer:
    """The two renderer methods `generate` calls when given `prompt_ids`."""

    def __init__(self, stop_ids: list[int]) -> None:
        self.stop_ids = stop_ids

    def get_stop_token_ids(self) -> list[int]:
        return list(self.stop_ids)

    def parse_response(self, completion_ids, prompt_ids=None, tools=None) -> ParsedResponse:
        return ParsedResponse(content="")


async def rollout(client: AsyncOpenAI, args: argparse.Namespace, renderer: TokenRenderer) -> list[dict]:
    prompts, seeds = json.loads(args.prompts), json.loads(args.seeds)
    records = []
    for prompt, seed in zip(prompts, seeds):
        sampling = {"max_tokens": args.max_tokens, "temperature": args.temperature, "seed": seed}
        out = await generate(
            client=client,
            renderer=renderer,
            messages=[],
            model=args.model,
            prompt_ids=prompt,
            sampling_params=sampling,
        )
        records.append(
            {
                "prompt_ids": out["prompt_ids"],
                "completion_ids": out["completion_ids"],
                "completion_logprobs": out["completion_logprobs"],
                "finish_reason": out["finish_reason"],
            }
        )
    return records


async def update_weights(url: str, weight_dir: str) -> list[int]:
    """The orchestrator's `update_weights` with a `weight_dir`: pause (keep), update, resume."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as admin:
        pause = await admin.post("/pause", params={"mode": "keep", "clear_cache": "false"})
        update = await admin.post("/update_weights", json={"weight_dir": weight_dir, "mode": "full"})
        resume = await admin.post("/resume")
    for response in (pause, update, resume):
        response.raise_for_status()
    return [pause.status_code, update.status_code, resume.status_code]


async def run(args: argparse.Namespace, report: dict) -> None:
    client = AsyncOpenAI(base_url=f"{args.url}/v1", api_key="none")
    renderer = TokenRenderer(json.loads(args.stop_ids))
    steps = report["steps"]
    try:
        steps["before"] = await rollout(client, args, renderer)
        steps["update"] = await update_weights(args.url, args.weights_dir)
        steps["after"] = await rollout(client, args, renderer)
    finally:
        await client.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--url", "--model", "--prompts", "--seeds", "--stop-ids", "--weights-dir", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()
    report: dict = {"python": sys.version.split()[0], "steps": {}, "error": None}
    try:
        asyncio.run(run(args, report))
    except BaseException as exc:  # the report says where it stopped; the test shows it
        report["error"] = {
            "type": type(exc).__name__,
            "message": str(exc)[:1000],
            "traceback": traceback.format_exc()[-4000:],
        }
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0 if report["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
