"""Runs verl 0.9.1's own rollout path on specroll's verl backend, on a local Ray of two CPUs, and writes
what it saw as JSON for tests/integrations/test_verl.py to judge.

Runs under the environment scripts/verl_env.sh builds (.venv-verl: verl without its GPU stacks, Ray,
torch, and this checkout's specroll). The backend is loaded the way a verl run loads it, through
`VERL_USE_EXTERNAL_MODULES` (set before verl is imported; Ray's workers inherit it). Then, as verl's
trainer does:
1. `LLMServerManager.create(config)` with `rollout.name=specroll`: verl's replica registry resolves
   `SpecrollReplica`, which starts the server actor; verl's global load balancer routes to it;
2. a rollout through verl's `LLMServerClient.generate` (the agent loop's call, its sampling fields);
3. a weight update as verl's trainer workers push one: the replica sleeps, the trainer-side adapter
   (`get_rollout_class("specroll")`) gets (name, tensor) pairs, the replica wakes; the rollout again;
   the adapter given LoRA adapter weights (`peft_config`), which it refuses;
4. a weight update from a directory (the server's other source); the rollout again;
5. a partial rollout: an unseeded request aborted, resent by verl's `FullyAsyncLLMServerClient`;
6. a call with a sampling field specroll lacks (`repetition_penalty` 1.1), refused by name.

    .venv-verl/bin/python tests/integrations/clients/verl_check.py --model DIR --weights-dir DIR \
        --prompts '[[ids...], ...]' --seeds '[s, ...]' --max-tokens N --temperature T --engine-seed S \
        --out report.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback

os.environ["VERL_USE_EXTERNAL_MODULES"] = "specroll.integrations.verl"

import ray  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from verl.workers.config import RolloutConfig  # noqa: E402
from verl.workers.rollout.base import get_rollout_class  # noqa: E402
from verl.workers.rollout.llm_server import (  # noqa: E402
    FullyAsyncLLMServerClient,
    LLMServerClient,
    LLMServerManager,
)


def verl_config(args: argparse.Namespace):
    """The trainer config's two sections a rollout reads, as verl's YAML gives them."""
    rollout = OmegaConf.structured(
        RolloutConfig(
            name="specroll",
            nnodes=1,
            n_gpus_per_node=1,
            tensor_model_parallel_size=1,
            data_parallel_size=1,
            pipeline_model_parallel_size=1,
            dtype="float32",
            seed=args.engine_seed,  # rollout.seed: the engine's, part of every draw's noise key
            prompt_length=64,
            response_length=args.max_tokens,
            max_num_seqs=8,
            calculate_log_probs=True,
            engine_kwargs={"specroll": {"max_batch_size": 8, "speculate": "on"}},
        )
    )
    with_targets(rollout)
    model = OmegaConf.create({"_target_": "verl.workers.config.HFModelConfig", "path": args.model})
    return OmegaConf.create({"actor_rollout_ref": {"rollout": rollout, "model": model}})


def with_targets(node) -> None:
    """Name each section's dataclass in its `_target_`, as verl's YAML files do (verl instantiates
    every section by it)."""
    if "_target_" in node:
        kind = OmegaConf.get_type(node)
        node._target_ = f"{kind.__module__}.{kind.__qualname__}"
    for key in node:
        if isinstance(node[key], DictConfig):
            with_targets(node[key])


def record(output) -> dict:
    return {
        "token_ids": list(output.token_ids),
        "log_probs": output.log_probs,
        "stop_reason": output.stop_reason,
        "weight_version": output.extra_fields.get("weight_version"),
        "global_steps": output.extra_fields.get("global_steps"),
        "seed": output.extra_fields.get("seed"),
    }


async def rollout(client, args: argparse.Namespace) -> list[dict]:
    """The agent loop's sampling fields (`AgentLoopWorker.generate_sequences`), a seed and a budget."""
    calls = [
        client.generate(
            f"sample-{i}",
            prompt_ids=prompt,
            sampling_params={
                "temperature": args.temperature,
                "top_p": 1.0,
                "top_k": -1,
                "repetition_penalty": 1.0,
                "logprobs": True,
                "max_tokens": args.max_tokens,
                "seed": seed,
            },
        )
        for i, (prompt, seed) in enumerate(zip(json.loads(args.prompts), json.loads(args.seeds)))
    ]
    return [record(out) for out in await asyncio.gather(*calls)]


async def drive(args: argparse.Namespace, steps: dict) -> None:
    config = verl_config(args)
    manager = await LLMServerManager.create(config)
    client = manager.get_client()
    replica = manager.get_replicas()[0]
    steps["replica"] = type(replica).__qualname__
    steps["before"] = await rollout(client, args)

    adapter = get_rollout_class("specroll", "async")(
        config=config.actor_rollout_ref.rollout, model_config=config.actor_rollout_ref.model,
        device_mesh=None, replica_rank=0,
    )  # fmt: skip
    await replica.sleep()
    weights = load_file(f"{args.weights_dir}/model.safetensors")
    await adapter.update_weights(iter(weights.items()), global_steps=1)
    await replica.wake_up()
    steps["after"] = await rollout(client, args)
    try:
        await adapter.update_weights(iter(weights.items()), peft_config={"r": 8}, global_steps=1)
    except NotImplementedError as err:
        steps["lora_refused"] = str(err)

    server = replica.servers[0]
    steps["directory_update"] = await server.update_weights.remote(args.model, 2)
    steps["restored"] = await rollout(client, args)

    steps["partial"] = await partial_rollout(manager, server, args)
    try:  # a sampling field specroll lacks, at a value that matters
        await server.generate.remote(json.loads(args.prompts)[0], {"repetition_penalty": 1.1}, "refused")
    except Exception as err:  # Ray's RayTaskError, carrying the actor's error
        steps["refused"] = str(err)


class Attempts(LLMServerClient):
    """Keeps each attempt's answer: verl's partial-rollout client merges them and drops the seed."""

    attempts: list[dict] = []

    async def generate(self, request_id, **kwargs):
        output = await super().generate(request_id, **kwargs)
        self.attempts.append(record(output))
        return output


class PartialRolloutClient(FullyAsyncLLMServerClient, Attempts):
    """verl's client for partial rollouts; its retries pass through `Attempts` (the MRO's next)."""


async def until_held(server, timeout: float = 30.0) -> None:
    """Wait for a request to reach the server (through verl's load balancer) and be held there."""
    for _ in range(int(timeout / 0.05)):
        load = await server.__ray_call__.remote(lambda actor: actor.server.state.engine_loop.load())
        if load[1]:  # (running, waiting)
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the request never reached the server")


async def partial_rollout(manager, server, args: argparse.Namespace) -> dict:
    """An unseeded request aborted before it drew (held behind the closed gate), then resent by verl's
    `FullyAsyncLLMServerClient` as prompt + partial tokens once generation resumes."""
    client = manager.get_client(PartialRolloutClient)
    params = {"temperature": args.temperature, "logprobs": True, "max_tokens": args.max_tokens}
    await server.abort_all_requests.remote()  # aborts nothing running; new requests are held
    task = asyncio.ensure_future(client.generate("partial", prompt_ids=json.loads(args.prompts)[0],
                                                 sampling_params=params))  # fmt: skip
    await until_held(server)
    aborted = await server.abort_all_requests.remote()
    await server.resume_generation.remote()
    final = record(await task)
    return {"aborted": aborted["aborted_count"], "attempts": Attempts.attempts, "final": final}


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--model", "--weights-dir", "--prompts", "--seeds", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--max-tokens", type=int, required=True)
    parser.add_argument("--engine-seed", type=int, required=True)
    parser.add_argument("--temperature", type=float, required=True)
    args = parser.parse_args()
    report: dict = {"steps": {}, "error": None}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    try:
        asyncio.run(drive(args, report["steps"]))
    except BaseException:  # reported, so the test can say which step failed and why
        report["error"] = traceback.format_exc()
    finally:
        ray.shutdown()
    with open(args.out, "w") as f:
        json.dump(report, f)
    return 0 if report["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
