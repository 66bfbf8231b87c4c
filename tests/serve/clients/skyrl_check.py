"""Drives a running `specroll serve` with SkyRL's own `RemoteInferenceClient`, the way SkyRL's trainer
does, and writes what it saw as JSON for tests/serve/test_skyrl_client.py to judge.

Runs under the Python 3.12 environment that scripts/skyrl_client_env.sh builds (skyrl without torch), so
it imports nothing from specroll. Usage:

    .venv-skyrl/bin/python tests/serve/clients/skyrl_check.py --url URL --model NAME \
        --prompts '[[ids...], ...]' --weights-dir DIR --out report.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback

import aiohttp
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient


def sampling_params(max_tokens: int, seed: int, logprobs: int | None = 1) -> dict:
    """What SkyRL's trainer sends for vLLM (`get_vllm_sampling_params` on the default
    `generator.sampling_params`, with a seed through `additional_kwargs`)."""
    return {
        "min_tokens": 1,
        "skip_special_tokens": True,
        "include_stop_str_in_output": True,
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "min_p": 0.0,
        "logprobs": logprobs,
        "stop": None,
        "repetition_penalty": 1.0,
        "seed": seed,
    }


def outputs(result: dict) -> dict:
    """The fields of an `InferenceEngineOutput` the trainer uses, as plain JSON."""
    return {
        "responses": list(result["responses"]),
        "response_ids": [list(ids) for ids in result["response_ids"]],
        "response_logprobs": result.get("response_logprobs"),
        "stop_reasons": list(result["stop_reasons"]),
    }


def error(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "status": getattr(exc, "status", None), "message": str(exc)[:500]}


async def weight_info(url: str) -> dict:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/weight_info") as resp:
            return {"status": resp.status, "body": await resp.json(content_type=None)}


async def run(args: argparse.Namespace, report: dict) -> None:
    prompts = json.loads(args.prompts)
    client = RemoteInferenceClient(
        proxy_url=args.url, server_urls=[args.url], data_parallel_size=1, model_name=args.model
    )
    steps = report["steps"]

    async def generate(max_tokens: int, seed: int, logprobs: int | None = 1, batch=None) -> dict:
        """As SkyRL's generator calls it: a routing id per trajectory (an `X-Session-ID` header) and a
        prefix-cache salt naming the policy's weight version (`generator.use_cache_salt`, on by default)."""
        batch = prompts if batch is None else batch
        return outputs(
            await client.generate(
                {
                    "prompt_token_ids": batch,
                    "sampling_params": sampling_params(max_tokens, seed, logprobs),
                    "session_ids": [f"trajectory-{i}" for i in range(len(batch))],
                    "cache_salt": f"{args.model}@{client.weight_version}",
                }
            )
        )

    try:
        steps["world_size"] = list(await client.get_world_size())
        steps["tokenize"] = await client.tokenize([args.text])

        # the rollout itself: token-id prompts, per-token logprobs, text through /detokenize
        steps["generate"] = await generate(args.max_tokens, seed=1234)
        steps["generate_again"] = await generate(args.max_tokens, seed=1234)
        steps["generate_no_logprobs"] = await generate(args.max_tokens, seed=1234, logprobs=None)

        # keep-mode pause (SkyRL's default around a weight sync): in-flight requests freeze and resume
        # where they were, with no retry by the client; a request sent while paused waits for /resume
        first = prompts[:1]
        running = asyncio.create_task(generate(args.long_tokens, seed=77, batch=first))
        await asyncio.sleep(0.05)
        steps["pause_keep"] = await client.pause(mode="keep")
        waiting = asyncio.create_task(generate(args.max_tokens, seed=1234, batch=first))
        await asyncio.sleep(args.paused_seconds)
        steps["paused_request_finished_early"] = waiting.done()
        steps["resume"] = await client.resume()
        steps["kept"] = await running
        steps["sent_while_paused"] = await waiting
        steps["uninterrupted"] = await generate(args.long_tokens, seed=77, batch=first)

        # abort-mode pause: in-flight requests come back with finish_reason "abort" and their partial tokens
        running = asyncio.create_task(generate(args.long_tokens, seed=78, batch=first))
        await asyncio.sleep(0.05)
        steps["pause_abort"] = await client.pause(mode="abort")
        steps["aborted"] = await running
        await client.resume()
        steps["abort_reference"] = await generate(args.long_tokens, seed=78, batch=first)

        # colocated training's memory cycle: sleep, wake the weights, (update), wake the KV cache
        steps["sleep"] = await client.sleep(level=2)
        steps["wake_weights"] = await client.wake_up(tags=["weights"])
        steps["wake_kv_cache"] = await client.wake_up(tags=["kv_cache"])
        steps["generate_after_wake"] = await generate(args.max_tokens, seed=1234)
        await client.sleep(level=1)
        await client.wake_up()

        steps["reset_prefix_cache"] = await client.reset_prefix_cache()

        # a weight sync from a safetensors directory: pause, update, reset the prefix cache, resume
        steps["weight_info_before"] = await weight_info(args.url)
        await client.pause(mode="keep")
        start = time.perf_counter()
        steps["update_weights"] = await client.update_named_weights({"path": args.weights_dir})
        steps["update_seconds"] = time.perf_counter() - start
        await client.reset_prefix_cache()
        await client.resume()
        client.increment_weight_version()
        steps["weight_info_after"] = await weight_info(args.url)
        steps["generate_after_update"] = await generate(args.max_tokens, seed=1234)

        # Tinker's sample(): n samples of one prompt through the same endpoint
        sample = await client.sample(
            {
                "json": {
                    "prompt": {"chunks": [{"type": "encoded_text", "tokens": prompts[0]}]},
                    "num_samples": 2,
                    "sampling_params": {"temperature": 1.0, "max_tokens": args.max_tokens, "seed": 5},
                }
            }
        )
        steps["sample"] = {"sequences": sample["sequences"]}

        # the OpenAI passthrough
        steps["completion"] = await client.completion(
            {"json": {"prompt": prompts[0], "max_tokens": 4, "temperature": 0.0, "logprobs": 1}}
        )

        # weight transfers that need NCCL or CUDA IPC cannot work on a CPU server: a clear 4xx, not a hang
        refusals = {}
        nccl_info = {"names": ["lm_head.weight"], "dtype_names": ["float32"], "shapes": [[1, 1]]}
        nccl_init = {"master_address": "127.0.0.1", "master_port": 1, "rank_offset": 1, "world_size": 2}
        for name, call in {
            "update_weights_nccl_shape": lambda: client.update_named_weights(nccl_info),
            "init_weight_transfer_engine": lambda: client._call_all_servers(
                "/init_weight_transfer_engine", {"init_info": nccl_init}
            ),
            "collective_rpc": lambda: client.start_weight_update(),
        }.items():
            try:
                refusals[name] = {"accepted": await call()}
            except aiohttp.ClientResponseError as exc:
                refusals[name] = error(exc)
        steps["refusals"] = refusals
    finally:
        await client.teardown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True, help="JSON list of token-id lists")
    parser.add_argument("--text", default="add a7 b5 c9\n", help="a text for /tokenize")
    parser.add_argument("--weights-dir", required=True)
    parser.add_argument("--max-tokens", type=int, default=12)
    parser.add_argument("--long-tokens", type=int, default=64)
    parser.add_argument("--paused-seconds", type=float, default=0.5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    report: dict = {"python": sys.version.split()[0], "steps": {}, "error": None}
    try:
        asyncio.run(run(args, report))
    except BaseException as exc:  # the report says where it stopped; the test shows it
        report["error"] = {**error(exc), "traceback": traceback.format_exc()[-4000:]}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0 if report["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
