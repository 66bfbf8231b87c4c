"""Users' tasks and rewards through the registry and `run_rollout`; gsm8k rollouts' rewards."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from specroll.engine.request import RequestOutput
from specroll.rollout import RolloutConfig, make_record, run_rollout
from specroll.tasks import (
    Gsm8kTask,
    JsonlTask,
    Problem,
    get_reward,
    get_task,
    known_tasks,
    register_reward,
    register_task,
)
from specroll.tasks.gsm8k import DEFAULT_PATH
from specroll.tokenizer import load_tokenizer

QWEN2_TOKENIZER = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tokenizers" / "qwen2"
FAST = dict(num_prompts=2, n=2, max_tokens=16, speculate="off")


@dataclass(frozen=True)
class EchoTask:
    """Prompts that ask for a number; any response holding the digit 7 earns 1.0."""

    name: str = "echo"
    use_chat_template: bool = True

    def problems(self, num_problems: int, seed: int) -> list[Problem]:
        return [Problem(10 + i, f"add a{seed + i} b7\n", "7") for i in range(num_problems)]

    def reward(self, problem: Problem, response_text: str) -> float:
        return 1.0 if problem.answer in response_text else 0.0


def test_user_task_runs_through_run_rollout():
    register_task("test-echo", EchoTask, replace=True)
    assert "test-echo" in known_tasks()
    result = run_rollout(RolloutConfig(task="test-echo", **FAST))
    assert [(r.prompt_id, r.sample) for r in result.records] == [(10, 0), (10, 1), (11, 0), (11, 1)]
    for record in result.records:
        assert record.error is None and 0 < len(record.token_ids) <= 16
        assert record.reward == (1.0 if "7" in record.text else 0.0)


def test_user_reward_scores_a_prompts_file(tmp_path):
    register_reward("test-has-answer", lambda answer, text: float(answer in text), replace=True)
    path = tmp_path / "p.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"add a{i} b{i}\n", "answer": str(2 * i)}) + "\n" for i in range(3))
    )
    register_task("test-file", lambda: JsonlTask(path, reward_name="test-has-answer"), replace=True)
    result = run_rollout(RolloutConfig(task="test-file", **FAST))
    assert sorted({r.prompt_id for r in result.records}) in ([0, 1], [0, 2], [1, 2])
    problems = {p.prompt_id: p for p in get_task("test-file").problems(3, seed=0)}
    for record in result.records:
        assert record.reward == float(problems[record.prompt_id].answer in record.text)


def test_registering_checks_names_and_refuses_silent_overrides():
    register_task("test-once", EchoTask, replace=True)
    with pytest.raises(ValueError, match="already registered"):
        register_task("test-once", EchoTask)
    with pytest.raises(ValueError, match="already registered"):
        register_reward("exact", lambda answer, text: 1.0)
    with pytest.raises(ValueError, match="non-empty"):
        register_task("", EchoTask)
    with pytest.raises(ValueError, match="callable"):
        register_reward("test-bad", "not a function")
    assert get_reward("exact")("a", "a") == 1.0


def test_a_task_lacking_members_is_named():
    @dataclass(frozen=True)
    class NoTemplateFlag:
        name: str = "partial"

        def problems(self, num_problems, seed):
            return []

        def reward(self, problem, response_text):
            return 0.0

    register_task("test-partial", NoTemplateFlag, replace=True)
    with pytest.raises(ValueError, match="'test-partial' lacks use_chat_template"):
        get_task("test-partial")


@pytest.mark.skipif(not DEFAULT_PATH.is_file(), reason="GSM8K data not beside the checkout")
def test_gsm8k_rollout_rewards_match_the_task():
    result = run_rollout(RolloutConfig(task="gsm8k", num_prompts=3, n=2, max_tokens=16, speculate="off"))
    problems = {p.prompt_id: p for p in Gsm8kTask().problems(3, seed=0)}
    assert {r.prompt_id for r in result.records} == set(problems)
    for record in result.records:
        assert record.reward == Gsm8kTask().reward(problems[record.prompt_id], record.text)


@pytest.mark.skipif(
    not (DEFAULT_PATH.is_file() and QWEN2_TOKENIZER.is_dir()),
    reason="GSM8K data or the shared Qwen2 tokenizer not beside the checkout",
)
def test_gsm8k_records_score_gold_answers_one_and_wrong_ones_zero():
    """A record's reward is the task's reward of its decoded tokens: real token ids of the gold
    solution score 1.0; the same solution with its final number changed scores 0.0."""
    tokenizer, task = load_tokenizer(QWEN2_TOKENIZER), Gsm8kTask()
    for problem in task.problems(8, seed=5):
        wrong = problem.reference_response.rsplit("####", 1)[0] + f"#### {int(problem.answer) + 3}"
        for text, expected in ((problem.reference_response, 1.0), (wrong, 0.0), ("", 0.0)):
            ids = tokenizer.encode(text)
            output = RequestOutput(problem.prompt_id, problem.prompt_id, 0, ids, [0.0] * len(ids), "length")
            record = make_record(output, tokenizer, task, problem)
            assert record.reward == expected, (problem.prompt_id, text)
        refused = RequestOutput(problem.prompt_id, problem.prompt_id, 0, [], [], "error", "refused")
        assert make_record(refused, tokenizer, task, problem).reward is None
