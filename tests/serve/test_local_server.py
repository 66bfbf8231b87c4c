"""The in-process server (`specroll.serve.local.LocalServer`, what verl's rollout actor runs): a body
drawn there equals, to the bit, the engine's own draw of the same prompt, seed and weights, before and
after weights arrive as a state dict or as a directory; aborts by the client's id end a choice."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from served_process import perturbed_copy  # noqa: E402

PROMPTS = ["add a7 b5 c9\n", "add x3 y8\n"]
SEEDS = [31, 32]
MAX_TOKENS = 12
FLAGS = ["--max-batch-size", "4", "--max-model-len", "64", "--dtype", "float32"]


def in_process(model_dir: Path, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    """The engine in this process, each prompt drawn as the server draws it: sample 0 of its seed."""
    from specroll.engine.factory import build_engine
    from specroll.engine.request import Request, SamplingParams
    from specroll.engine_config import EngineConfig
    from specroll.rollout import RolloutConfig
    from specroll.serve.keys import group_key, noise_key

    config = RolloutConfig(model_dir=model_dir, max_tokens=MAX_TOKENS, engine=EngineConfig(max_batch_size=4))
    engine = build_engine(config.engine_spec(), max(map(len, prompts)))
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0)
    requests = [
        Request(i, group_key(p), 0, tuple(p), params, noise_key=noise_key(seed, 0))
        for i, (p, seed) in enumerate(zip(prompts, SEEDS))
    ]
    for request in requests:
        engine.add_request(request)
    engine.run()
    return [(r.output_token_ids, r.output_logprobs) for r in requests]


async def draw(server, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    bodies = [
        {"token_ids": p, "sampling_params": {"max_tokens": MAX_TOKENS, "seed": s, "logprobs": 0}}
        for p, s in zip(prompts, SEEDS)
    ]
    generations = await asyncio.gather(*(server.generate(b) for b in bodies))
    return [(list(g.choices[0].token_ids), list(g.choices[0].logprobs)) for g in generations]


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> dict:
    from safetensors.torch import load_file

    from specroll.rollout import DEFAULT_MODEL
    from specroll.integrations.serve_flags import local_server_from_flags
    from specroll.tokenizer import load_tokenizer

    perturbed = perturbed_copy(DEFAULT_MODEL, tmp_path_factory.mktemp("local") / "step_1")
    prompts = [load_tokenizer(DEFAULT_MODEL).encode(p) for p in PROMPTS]

    async def run() -> dict:
        server = local_server_from_flags(["--model", str(DEFAULT_MODEL), *FLAGS])
        await server.start()
        try:
            out = {"start": await draw(server, prompts)}
            out["dict_version"] = await server.load_weights(load_file(perturbed / "model.safetensors"))
            out["from_dict"] = await draw(server, prompts)
            out["dir_version"] = await server.load_weights(str(DEFAULT_MODEL))
            out["from_dir"] = await draw(server, prompts)
            out["aborted"] = await abort_one(server, prompts[0])
            return out
        finally:
            server.stop()

    seen = asyncio.run(run())
    seen["expected"] = {
        "start": in_process(DEFAULT_MODEL, prompts),
        "perturbed": in_process(perturbed, prompts),
    }
    return seen


async def abort_one(server, prompt: list[int]) -> tuple[str, int]:
    """Pause (so the choice cannot end first), start it under a client id, abort it by that id."""
    await server.pause("keep")
    body = {"token_ids": prompt, "sampling_params": {"max_tokens": MAX_TOKENS}, "request_id": "mine"}
    task = asyncio.ensure_future(server.generate(body))
    while "mine" not in server.state.generations:
        await asyncio.sleep(0.01)
    count = await server.abort("mine")
    generation = await task
    await server.resume()
    return generation.choices[0].finish_reason, count


def test_a_body_draws_what_the_engine_draws_to_the_bit(seen):
    assert seen["start"] == seen["expected"]["start"]


def test_weights_as_a_state_dict_draw_as_the_engine_built_on_them(seen):
    assert seen["dict_version"] == 1
    assert seen["from_dict"] == seen["expected"]["perturbed"]
    assert seen["from_dict"] != seen["start"]


def test_weights_from_a_directory_draw_as_the_engine_built_on_them(seen):
    assert seen["dir_version"] == 2
    assert seen["from_dir"] == seen["expected"]["start"]


def test_an_abort_by_the_clients_id_ends_its_choice(seen):
    assert seen["aborted"] == ("abort", 1)
