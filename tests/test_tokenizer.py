"""Prompt encoding: the chat template where the checkpoint has one and the task uses it, else raw text."""

from __future__ import annotations

from pathlib import Path

import pytest

from specroll.rollout import CHECKPOINTS, encode_prompts
from specroll.tasks import Problem, RunningSumTask, get_task
from specroll.tokenizer import load_tokenizer

QWEN2_TOKENIZER = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers" / "qwen2"
needs_qwen2 = pytest.mark.skipif(
    not QWEN2_TOKENIZER.is_dir(), reason="shared Qwen2 tokenizer not beside the checkout"
)


def test_bundled_policy_has_no_template_so_prompts_stay_raw():
    tokenizer = load_tokenizer(CHECKPOINTS / "policy")
    assert not tokenizer.has_chat_template
    for problem in get_task("running_sum").problems(10, seed=0):
        assert tokenizer.encode_prompt(problem.prompt) == tokenizer.encode(problem.prompt)
        assert tokenizer.encode_prompt(problem.prompt, use_chat_template=False) == tokenizer.encode(
            problem.prompt
        )


@needs_qwen2
def test_chat_template_wraps_the_prompt_as_a_user_turn():
    tokenizer = load_tokenizer(QWEN2_TOKENIZER)
    assert tokenizer.has_chat_template
    ids = tokenizer.encode_prompt("What is 2+2?")
    assert all(isinstance(i, int) for i in ids)
    assert tokenizer.hf.decode(ids) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.encode_prompt("What is 2+2?", use_chat_template=False) == tokenizer.encode(
        "What is 2+2?"
    )


@needs_qwen2
def test_tasks_choose_template_or_raw():
    tokenizer = load_tokenizer(QWEN2_TOKENIZER)
    problem = Problem(0, "add a7 b5\n", "12")
    raw = encode_prompts(tokenizer, RunningSumTask(), {0: problem})
    chat = encode_prompts(tokenizer, RunningSumTask(use_chat_template=True), {0: problem})
    assert raw == {0: tuple(tokenizer.encode(problem.prompt))}
    assert chat == {0: tuple(tokenizer.encode_prompt(problem.prompt))} and chat != raw
