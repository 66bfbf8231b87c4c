"""Exactness over HTTP on a real vocabulary: SmolLM2's 49,152 tokens, GSM8K questions at T=1. The same
requests one at a time and all at once to a server that speculates, and to one that does not, give the
same tokens and log-probabilities to the bit, with drafts verified and accepted."""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest
from real_models import require_smollm2

from specroll.serve.child import ServeProcess

LIMITS = ["--model", "smollm2", "--max-model-len", "160", "--max-batch-size", "16", "--max-tokens", "32"]
QUESTIONS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
    "How much did she earn?",
    "Betty is saving money for a new wallet which costs $100. How much more money does Betty need?",
]


@pytest.fixture(scope="module")
def smollm2_servers():
    require_smollm2()
    # a fixed cap: whether `auto` drafts in a run this short depends on the forwards it times, and the
    # test needs drafts verified
    speculating = ServeProcess([*LIMITS, "--speculate", "on", "--policy", "fixed-2"])
    on, off = speculating, ServeProcess([*LIMITS, "--speculate", "off"])
    try:
        yield on.wait_ready(300), off.wait_ready(300)
    finally:
        assert (on.stop(), off.stop()) == (0, 0)


def ask(server: ServeProcess, i: int) -> list[tuple[list[int], list[str]]]:
    body = {"prompt": QUESTIONS[i], "n": 2, "max_tokens": 32, "temperature": 1.0, "seed": 100 + i}
    response = httpx.post(
        server.url + "/v1/completions", json={**body, "logprobs": 1, "return_token_ids": True}, timeout=600
    )
    assert response.status_code == 200, response.text
    return [
        (c["token_ids"], [x.hex() for x in c["logprobs"]["token_logprobs"]])
        for c in response.json()["choices"]
    ]


def test_served_smollm2_choices_are_the_same_alone_together_and_without_speculation(smollm2_servers):
    on, off = smollm2_servers
    alone = [ask(on, i) for i in range(len(QUESTIONS))]
    with concurrent.futures.ThreadPoolExecutor(len(QUESTIONS)) as pool:
        together = list(pool.map(lambda i: ask(on, i), range(len(QUESTIONS))))
    plain = [ask(off, i) for i in range(len(QUESTIONS))]
    assert together == alone
    assert plain == alone
    assert sum(len(tokens) for choices in alone for tokens, _ in choices) > 3 * 2 * 8
    metrics = httpx.get(on.url + "/metrics").text
    per_forward = next(
        line for line in metrics.splitlines() if line.startswith("specroll_tokens_per_forward")
    )
    assert float(per_forward.split()[-1]) > 1.0  # drafts were verified and accepted
