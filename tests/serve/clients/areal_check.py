"""Drives a running `specroll serve` with AReaL 1.0's own remote inference engine (`RemotevLLMEngine`,
`areal/engine/vllm_remote.py` over `areal/infra/remote_inf_engine.py`), the way AReaL's trainer does, and
writes what it saw as JSON for tests/serve/test_areal_client.py to judge.

Runs under the environment scripts/areal_client_env.sh builds (.venv-areal: areal without its GPU and
agent stacks, torch, aiohttp), so it imports nothing from specroll. Steps:
1. `initialize(addr=HOST:PORT)` (AReaL waits on /health) and a rollout through `agenerate` (POST
   /v1/completions with token ids; on `abort` it resends prompt + partial tokens);
2. `pause_generation()` (/areal_pause_generation), a weight update from disk as the trainer makes one: the
   trainer names the saved checkpoint in AReaL's name_resolve (`names.update_weights_from_disk`), the
   engine's `update_weights_from_disk` waits for that name and posts /areal_update_weights; then
   `set_version(1)` and `continue_generation()` (/areal_continue_generation); the rollout again;
3. the client-side `pause()`/`resume()` of its workflow executor, and `offload()`/`onload()` (/sleep,
   /wake_up?tags=...).

    .venv-areal/bin/python tests/serve/clients/areal_check.py --addr HOST:PORT --prompts '[[ids...]]' \
        --stop-ids '[eos]' --weights-dir DIR --name-root DIR --max-tokens N --out report.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import traceback

from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig, NameResolveConfig
from areal.api.io_struct import ModelRequest, WeightUpdateMeta
from areal.engine.vllm_remote import RemotevLLMEngine
from areal.utils import name_resolve, names

EXPERIMENT, TRIAL = "specroll-check", "trial0"


async def rollout(engine: RemotevLLMEngine, args: argparse.Namespace) -> list[dict]:
    stop_ids = json.loads(args.stop_ids)
    requests = [
        ModelRequest(
            input_ids=list(p),
            gconfig=GenerationHyperparameters(max_new_tokens=args.max_tokens, stop_token_ids=list(stop_ids)),
        )
        for p in json.loads(args.prompts)
    ]
    responses = await asyncio.gather(*(engine.agenerate(r) for r in requests))
    return [
        {
            "input_tokens": list(r.input_tokens),
            "output_tokens": list(r.output_tokens),
            "output_logprobs": list(r.output_logprobs),
            "output_versions": list(r.output_versions),
            "stop_reason": r.stop_reason,
        }
        for r in responses
    ]


def update_from_disk(engine: RemotevLLMEngine, weights_dir: str, steps: dict) -> None:
    """The trainer's side (AReaL's `_update_weights_from_disk` after saving) names the checkpoint; the
    inference engine's side waits for the name and posts the update to every server."""
    meta = WeightUpdateMeta(type="disk", path=weights_dir, clear_checkpoint_after_load=False)
    engine.pause_generation()
    future = engine.update_weights_from_disk(meta)
    name_resolve.add(
        names.update_weights_from_disk(EXPERIMENT, TRIAL, engine.get_version()), str(time.time())
    )
    steps["update_seconds"] = future.result(timeout=120)
    engine.set_version(engine.get_version() + 1)
    engine.continue_generation()


def drive(args: argparse.Namespace, steps: dict) -> None:
    name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=args.name_root))
    config = InferenceEngineConfig(
        experiment_name=EXPERIMENT,
        trial_name=TRIAL,
        backend="vllm:d1",
        max_concurrent_rollouts=4,
        consumer_batch_size=1,
        request_timeout=60,
        request_retries=1,
        pause_grace_period=0.1,
        setup_timeout=60,
    )
    engine = RemotevLLMEngine(config)
    engine.initialize(addr=args.addr)
    try:
        steps["before"] = asyncio.run(rollout(engine, args))
        update_from_disk(engine, args.weights_dir, steps)
        steps["version"] = engine.get_version()
        steps["after"] = asyncio.run(rollout(engine, args))
        engine.pause()
        steps["paused"] = engine.workflow_executor.is_paused()
        engine.resume()
        engine.offload()
        engine.onload(tags=["weights", "kv_cache"])
        steps["resumed"] = asyncio.run(rollout(engine, args))
    finally:
        engine.destroy()


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--addr", "--prompts", "--stop-ids", "--weights-dir", "--name-root", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--max-tokens", type=int, required=True)
    args = parser.parse_args()
    report: dict = {"steps": {}, "error": None}
    try:
        drive(args, report["steps"])
    except BaseException:  # reported, so the test can say which step failed and why
        report["error"] = traceback.format_exc()
    with open(args.out, "w") as f:
        json.dump(report, f)
    return 0 if report["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
