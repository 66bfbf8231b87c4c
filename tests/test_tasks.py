"""The bundled task (literal prompts, rewards, determinism, heavy-tailed lengths) and its checkpoints."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from specroll.tasks import DEFAULT_TASK, Problem, RunningSumTask, Task, get_task

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
MAX_CHECKPOINT_BYTES = 20 * 1024 * 1024


def test_default_task_is_registered_running_sum():
    task = get_task(DEFAULT_TASK)
    assert isinstance(task, Task)
    assert task.name == DEFAULT_TASK == "running_sum"


def test_unknown_task_error_names_it_and_the_known_ones():
    with pytest.raises(ValueError, match=r"'nope'.*running_sum"):
        get_task("nope")


def test_known_problem_prompt_and_reference_response():
    problem = RunningSumTask().make_problem(7, [7, 5, 9])
    assert problem == Problem(
        prompt_id=7,
        prompt="add a7 b5 c9\n",
        answer="21",
        reference_response="+a7=700\n+b5=210\n+c9=120\nanswer 21",
    )
    wide = RunningSumTask(min_term=10, max_term=99, sum_width=4).make_problem(7, [37, 52, 19])
    assert wide.reference_response == "+a37=7300\n+b52=9800\n+c19=8010\nanswer 108"


def test_reward_of_correct_and_wrong_responses():
    task = RunningSumTask()
    problem = task.make_problem(0, [37, 52, 19])
    assert task.reward(problem, problem.reference_response) == 1.0
    assert task.reward(problem, "+a37=7300\n+b52=9800\n+c19=8010\nanswer 108\n") == 1.0
    assert task.reward(problem, "+a37=7300\n+b52=9800\n+c19=9010\nanswer 109") == 0.0
    assert task.reward(problem, "+a37=7300\n+b52=9800\n+c19=8010\n") == 0.0  # no final answer
    assert task.reward(problem, "answer 108\n+c19=8010") == 0.0  # answer not last
    assert task.reward(problem, "answer 1080") == 0.0


def test_problems_are_deterministic_given_a_seed():
    task = get_task(DEFAULT_TASK)
    assert task.problems(20, seed=3) == task.problems(20, seed=3)
    assert task.problems(20, seed=3) != task.problems(20, seed=4)
    assert [p.prompt_id for p in task.problems(5, seed=0)] == [0, 1, 2, 3, 4]


def test_every_reference_response_earns_full_reward():
    task = get_task(DEFAULT_TASK)
    assert all(task.reward(p, p.reference_response) == 1.0 for p in task.problems(200, seed=1))


def test_reference_lengths_are_heavy_tailed_and_bounded():
    task = RunningSumTask()
    lengths = sorted(len(p.reference_response) for p in task.problems(2000, seed=0))
    p50, p99 = lengths[len(lengths) // 2], lengths[int(0.99 * len(lengths))]
    assert p99 / p50 >= 4
    assert lengths[-1] <= 10 * task.max_terms + len("answer ") + task.sum_width


def test_term_counts_cover_the_configured_range():
    task = RunningSumTask()
    counts = [len(task.draw_terms(random.Random(seed))) for seed in range(3000)]
    assert min(counts) == task.min_terms and max(counts) == task.max_terms


def test_invalid_configuration_is_rejected():
    with pytest.raises(ValueError):
        RunningSumTask(min_terms=5, max_terms=4)
    with pytest.raises(ValueError):
        RunningSumTask(max_terms=52, max_term=999)  # 52 x 999 needs five digits
    with pytest.raises(ValueError):
        RunningSumTask(max_terms=60, sum_width=6)  # more terms than labels


@pytest.mark.parametrize("name", ["policy", "draft"])
def test_checkpoint_is_small_qwen2_with_matching_tokenizer(name):
    transformers = pytest.importorskip("transformers")
    directory = CHECKPOINTS / name
    assert sum(f.stat().st_size for f in directory.iterdir()) <= MAX_CHECKPOINT_BYTES
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
    assert model.config.model_type == "qwen2"
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.num_key_value_heads < model.config.num_attention_heads or name == "draft"
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert (
        json.loads((directory / "generation_config.json").read_text())["eos_token_id"]
        == tokenizer.eos_token_id
    )


@pytest.mark.parametrize("name", ["policy", "draft"])
def test_tokenizer_round_trips_prompts_and_responses(name):
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(CHECKPOINTS / name, local_files_only=True)
    for problem in get_task(DEFAULT_TASK).problems(20, seed=0):
        text = problem.prompt + problem.reference_response
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True) == text
        # digits, signs and newlines are one token each; the two words are one token each
        assert len(ids) == len(text) - 2 - 5


def test_policy_and_draft_share_the_tokenizer():
    policy = json.loads((CHECKPOINTS / "policy" / "tokenizer.json").read_text())
    draft = json.loads((CHECKPOINTS / "draft" / "tokenizer.json").read_text())
    assert policy["model"]["vocab"] == draft["model"]["vocab"]
