"""The real SmolLM2-135M-Instruct, as `specroll models pull smollm2` converts it: the runner's logits
equal `transformers`' LlamaForCausalLM on the same directory (fp32, 1e-4) over a chat prompt and a
few greedy decode steps, and its tokenizer renders the chat template. `make test` pulls it first;
elsewhere these tests skip until it is pulled."""

from __future__ import annotations

import pytest
import torch
from test_runner_matches_transformers import ATOL, hf_logits

from specroll.model.runner import ModelRunner, SequenceInput
from specroll.tokenizer import load_tokenizer

MESSAGES = [{"role": "user", "content": "What is 17 + 25? Answer with the number only."}]
NUM_DECODE_STEPS = 3


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    return load_tokenizer(smollm2_dir)


@pytest.fixture(scope="module")
def chat_prompt(tokenizer) -> list[int]:
    return list(
        tokenizer.hf.apply_chat_template(
            MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
        )
    )


def test_chat_template_renders_a_user_message(tokenizer):
    text = tokenizer.hf.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert f"<|im_start|>user\n{MESSAGES[0]['content']}<|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert tokenizer.hf.convert_ids_to_tokens(list(tokenizer.stop_token_ids)) == ["<|im_end|>"]


def test_runner_matches_transformers_on_a_chat_prompt(smollm2_dir, chat_prompt):
    from transformers import LlamaForCausalLM

    torch.set_num_threads(1)
    hf_model = LlamaForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32).eval()
    runner = ModelRunner.from_pretrained(
        smollm2_dir, num_slots=1, capacity=len(chat_prompt) + NUM_DECODE_STEPS
    )
    assert runner.config.tie_word_embeddings and runner.config.num_layers == 30

    tokens = list(chat_prompt)
    logits = runner.forward([SequenceInput(0, 0, tokens)]).logits[0, 0]  # prefill: the last position's
    for _ in range(NUM_DECODE_STEPS):
        expected = assert_matches(logits, hf_model, tokens)
        tokens.append(int(expected.argmax()))  # greedy, as transformers would continue
        logits = runner.forward([SequenceInput(0, len(tokens) - 1, tokens[-1:])]).logits[0, 0]
    assert_matches(logits, hf_model, tokens)


def assert_matches(logits: torch.Tensor, hf_model, tokens: list[int]) -> torch.Tensor:
    """`logits` (V,) against transformers' last-position logits over `tokens`; returns the latter."""
    expected = hf_logits(hf_model, tokens)[-1]  # (V,)
    diff = (logits - expected).abs().max().item()
    assert diff < ATOL, f"max |runner - transformers| = {diff:.2e} after {len(tokens)} tokens"
    return expected


def test_automatic_threads_keep_batch_invariant_numerics(smollm2_dir):
    """Where the BLAS has no row-count-invariant regime at every core (two threads on some x86
    machines), an automatic thread count drops to one rather than give up identity."""
    from specroll.model.runner import batch_invariance_available
    from specroll.engine.threads import apply_threads
    from specroll.engine.spec import EngineSpec

    threads = torch.get_num_threads()
    try:
        apply_threads(EngineSpec(smollm2_dir, max_tokens=64))
        assert batch_invariance_available(smollm2_dir)
    finally:
        torch.set_num_threads(threads)
