"""The exactness contract over HTTP: a choice's tokens and log-probabilities depend on the weights, the
prompt, the sampling settings, the seed and the choice's index alone: one at a time, 32 at once, and
with speculation off give the same bits; an aborted choice continued equals the uninterrupted one;
the log-probabilities are the trainer's recomputation."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from conftest import API_KEY

PROMPTS = [[3 + i % 5, 10 + i % 7, 20 + i % 3, 4] for i in range(32)]
SAMPLING = [dict(temperature=1.0), dict(temperature=0.7, top_k=8), dict(temperature=1.0, top_p=0.9)]


def _body(i: int) -> dict:
    return {
        "prompt": PROMPTS[i],
        "max_tokens": 24,
        "seed": 1000 + i % 4,
        "n": 1 + i % 2,
        "logprobs": 0,
        "return_token_ids": True,
        **SAMPLING[i % 3],
    }


def _outputs(url: str, body: dict, headers: dict | None = None) -> list[tuple]:
    out = httpx.post(url + "/v1/completions", json=body, headers=headers, timeout=60).json()
    return [(c["token_ids"], c["logprobs"]["token_logprobs"], c["finish_reason"]) for c in out["choices"]]


@pytest.fixture(scope="module")
def one_at_a_time(server):
    return [_outputs(server.url, _body(i)) for i in range(32)]


def test_32_at_once_equal_one_at_a_time(server, one_at_a_time):
    with ThreadPoolExecutor(32) as pool:
        together = list(pool.map(lambda i: _outputs(server.url, _body(i)), range(32)))
    assert together == one_at_a_time


def test_speculation_off_gives_the_same_bits(plain_server, one_at_a_time):
    with ThreadPoolExecutor(8) as pool:
        key = {"Authorization": f"Bearer {API_KEY}"}
        plain = list(pool.map(lambda i: _outputs(plain_server.url, _body(i), key), range(32)))
    assert plain == one_at_a_time


def _abort_midway(url: str, body: dict, length: int) -> tuple[list[int], list[float], str | None, dict]:
    """Stream `body`, pausing the server (abort) once some but not all `length` tokens arrived."""
    partial, logprobs, finish, last = [], [], None, {}
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", url + "/v1/completions", json={**body, "stream": True}) as events:
            for line in events.iter_lines():
                if not line.startswith("data: {"):
                    continue
                last = json.loads(line[6:])["choices"][0]
                partial += last.get("token_ids") or []
                logprobs += (last.get("logprobs") or {}).get("token_logprobs") or []
                finish = last["finish_reason"] or finish
                if partial and finish is None and len(partial) < length:
                    client.post(url + "/pause", params={"mode": "abort"})
        client.post(url + "/resume")
    return partial, logprobs, finish, last


def test_an_aborted_choice_continued_equals_the_uninterrupted_one(server):
    prompt = [7, 8, 9, 10]
    base = {
        "prompt": prompt,
        "max_tokens": 90,
        "seed": 4242,
        "logprobs": 0,
        "return_token_ids": True,
        "sample_index": 3,
    }
    whole = _outputs(server.url, base)[0]
    partial, logprobs, finish, _ = _abort_midway(server.url, base, len(whole[0]))
    if finish != "abort":
        pytest.skip("the choice finished before the pause reached it")
    assert partial == whole[0][: len(partial)] and logprobs == whole[1][: len(partial)]
    rest = _outputs(
        server.url,
        {**base, "prompt": prompt + partial, "continue_from": len(prompt), "max_tokens": 90 - len(partial)},
    )[0]
    assert partial + rest[0] == whole[0]
    assert logprobs + rest[1] == whole[1]
    assert rest[2] == whole[2]


def test_an_unseeded_aborted_choice_resent_as_prompt_plus_partial_continues_exactly(server):
    """AReaL's abort-and-resend: no seed, no continue_from; the server recognises its aborted choice."""
    prompt = [9, 8, 7, 6]
    body = {"prompt": prompt, "max_tokens": 90, "logprobs": 0, "return_token_ids": True}
    partial, logprobs, finish, last = _abort_midway(server.url, body, 90)
    if finish != "abort":
        pytest.skip("the choice finished before the pause reached it")
    rest = _outputs(server.url, {**body, "prompt": prompt + partial, "max_tokens": 90 - len(partial)})[0]
    whole = _outputs(server.url, {**body, "seed": last["seed"]})[0]
    assert partial + rest[0] == whole[0]
    assert logprobs + rest[1] == whole[1]


def test_logprobs_equal_the_trainers_recomputation(server, one_at_a_time):
    import torch

    from specroll.engine_config import EngineConfig
    from specroll.rollout import DEFAULT_MODEL
    from specroll.train.policy_forward import PolicyForward, load_trainable, sequence_logprobs

    forward = PolicyForward(load_trainable(DEFAULT_MODEL), EngineConfig())
    for i in (0, 3):  # temperature 1: the trainer's policy_logprobs at that temperature
        for tokens, logprobs, _ in one_at_a_time[i]:
            with torch.no_grad():
                ours, mask = sequence_logprobs(forward, [PROMPTS[i]], [tokens], 1.0)
            assert torch.allclose(ours[0], torch.tensor(logprobs), atol=1e-4)
