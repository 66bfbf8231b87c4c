"""The plain engine (no drafter) against an independent reference: `transformers` greedy `generate`,
one prompt at a time, token for token, with the stop token included where it is reached.

The speculative tests compare the engine with itself; this one anchors the plain engine, so an error
shared by both paths (cache positions, rotary tables, sampling) cannot hide.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from helpers import rollout

from specroll.engine.request import Request, SamplingParams
from specroll.rollout import CHECKPOINTS


def greedy_requests(prompts, max_tokens):
    return [
        Request(i, i, 0, tuple(p), SamplingParams(max_tokens=max_tokens, temperature=0.0))
        for i, p in enumerate(prompts)
    ]


def generate(model, prompt, max_tokens):
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_tokens,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("checkpoint", ["bundled-policy", "tiny-qwen2"])
def test_greedy_plain_engine_equals_transformers_generate(checkpoint, qwen2_dir, one_thread):
    model_dir = CHECKPOINTS / "policy" if checkpoint == "bundled-policy" else qwen2_dir
    vocab = transformers.AutoConfig.from_pretrained(str(model_dir)).vocab_size
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(2, vocab, (n,), generator=g).tolist() for n in (5, 11, 3, 8)]
    engine_out = rollout(model_dir, greedy_requests(prompts, max_tokens=40), max_batch_size=4)
    assert sum(len(r.output_token_ids) for r in engine_out) > len(prompts)  # more than one token each
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    for request, prompt in zip(engine_out, prompts, strict=True):
        assert request.output_token_ids == generate(model, prompt, 40), request.request_id
