"""GSM8K: the answer parser on literal responses, the reward on real test-set answers, the data's location."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from specroll.tasks import Gsm8kTask, get_task
from specroll.tasks.answers import final_answer, is_same_number, parse_number
from specroll.tasks.gsm8k import DEFAULT_PATH, ENV_VAR, INSTRUCTION, gold_answer, gsm8k_path

SHARED_COPY = Path(__file__).resolve().parents[2] / "shared" / "data" / "text" / "gsm8k_test.jsonl"

JANET = (
    "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
    "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer\u2019s market.\n#### 18"
)


@pytest.mark.parametrize(
    "text, expected",
    [
        (JANET, "18"),
        ("#### 1,600", "1600"),
        ("#### -10", "-10"),
        ("#### $18.00.", "18.00"),
        ("The answer is: 18", "18"),
        ("So the answer is $1,450,000.", "1450000"),
        ("9 * 2 = 18 dollars a day.", "18"),  # no marker: the last number
        ("#### 5\nOn second thought,\n#### 7", "7"),  # the last `####`
        ("#### 18\nThat took 3 steps.", "18"),  # `####` outranks a later number
        ("The answer is 12. Check: 12 + 3 = 15", "12"),  # so does "answer is"
        ("The answer is: 4\n#### 5", "5"),  # and `####` outranks "answer is"
        ("####\nThe answer is 4", "4"),  # a `####` with no number falls through
        ("She has 3,4 or 5 left", "5"),  # a malformed thousands group is no number
        ("I do not know.", None),
    ],
)
def test_final_answer(text, expected):
    assert final_answer(text) == expected


@pytest.mark.parametrize(
    "text, value",
    [
        ("18", Decimal(18)),
        ("18.00", Decimal(18)),
        ("$1,200.", Decimal(1200)),
        ("-3", Decimal(-3)),
        ("-$5", Decimal(-5)),
        ("0.5", Decimal("0.5")),
        ("eighteen", None),
        ("", None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_numbers_compare_by_value():
    assert is_same_number("The answer is 18.00", "18")
    assert is_same_number("#### 1,600", "... #### 1600")
    assert not is_same_number("#### 18", "180")
    assert not is_same_number("no number", "18")


def test_gold_answer_of_literal_solutions():
    assert gold_answer(JANET) == "18"
    assert gold_answer("2,000 + 125 = <<2000+125=2125>>2,125\n#### 2,125") == "2125"
    with pytest.raises(ValueError, match="####"):
        gold_answer("The answer is 18")
    with pytest.raises(ValueError, match="####"):
        gold_answer("#### none")


def test_make_problem_prompt_answer_and_reference():
    problem = Gsm8kTask().make_problem(0, "How many eggs?", JANET)
    assert problem.prompt == f"How many eggs?\n{INSTRUCTION}"
    assert INSTRUCTION == 'Solve it step by step, then write the final answer as "#### <number>".'
    assert problem.answer == "18"
    assert "<<" not in problem.reference_response and problem.reference_response.endswith("#### 18")


def test_missing_data_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere.jsonl"))
    with pytest.raises(FileNotFoundError, match=ENV_VAR):
        Gsm8kTask().problems(4, seed=0)
    with pytest.raises(FileNotFoundError, match=ENV_VAR):
        gsm8k_path(tmp_path / "also-nowhere.jsonl")


def test_env_var_and_explicit_path_choose_the_file(tmp_path, monkeypatch):
    data = tmp_path / "mini.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}) + "\n")
    monkeypatch.setenv(ENV_VAR, str(data))
    [problem] = get_task("gsm8k").problems(5, seed=0)
    assert (problem.prompt_id, problem.answer) == (0, "4")
    monkeypatch.delenv(ENV_VAR)
    assert Gsm8kTask(path=data).problems(1, seed=0) == [problem]


def test_real_problems_keep_their_line_index_and_recur_by_seed():
    task = get_task("gsm8k")
    problems = task.problems(16, seed=3)
    assert problems == task.problems(16, seed=3) and problems != task.problems(16, seed=4)
    with gzip.open(DEFAULT_PATH, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) == 1319 and len(task.problems(5000, seed=0)) == 1319
    for p in problems:
        record = json.loads(lines[p.prompt_id])
        assert p.prompt == f"{record['question'].strip()}\n{INSTRUCTION}"
        assert p.answer == record["answer"].rsplit("####", 1)[1].strip().replace(",", "")
    first = Gsm8kTask().problems(1319, seed=0)[0]
    assert first.prompt.startswith("Janet\u2019s ducks lay 16 eggs per day.") and first.answer == "18"


@pytest.mark.skipif(not SHARED_COPY.is_file(), reason=f"no reference copy at {SHARED_COPY}")
def test_the_bundled_test_set_is_the_published_one():
    with gzip.open(DEFAULT_PATH, "rt", encoding="utf-8") as f:
        assert f.read() == SHARED_COPY.read_text(encoding="utf-8")


def test_reward_on_real_answers():
    task = Gsm8kTask()
    problems = task.problems(1319, seed=0)
    assert all(task.reward(p, p.reference_response) == 1.0 for p in problems)
    for p in problems[:50]:
        value = Decimal(p.answer)
        assert task.reward(p, f"Let me think.\nThe answer is: {p.answer}") == 1.0
        assert task.reward(p, f"#### {value + 1}") == 0.0
        assert task.reward(p, re.sub(r"####.*$", f"#### {value - 1}", p.reference_response)) == 0.0
        assert task.reward(p, f"#### {value:.2f}") == 1.0  # "18.00"
