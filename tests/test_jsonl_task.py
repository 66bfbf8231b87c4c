"""A task from a user's JSONL file: reading, clear errors on bad lines, sampling, rewards, `--prompts`."""

from __future__ import annotations

import json

import pytest

from specroll.cli import main
from specroll.tasks import JsonlTask, Problem, get_reward, known_rewards
from specroll.tasks.jsonl import read_problems, sample_problems

SMALL = [
    "--num-prompts",
    "4",
    "--n",
    "2",
    "--max-tokens",
    "16",
    "--max-batch-size",
    "8",
    "--speculate",
    "off",
]


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_records_become_problems_keyed_by_line(tmp_path):
    path = write_lines(
        tmp_path / "p.jsonl",
        [
            json.dumps({"prompt": "add a7 b5\n", "answer": "12"}),
            "",
            json.dumps({"prompt": "add a1\n", "answer": 1}),
            json.dumps({"prompt": "add a2\n"}),
            json.dumps({"prompt": "add a3\n", "answer": None}),
        ],
    )
    assert read_problems(path) == [
        Problem(0, "add a7 b5\n", "12"),
        Problem(2, "add a1\n", "1"),
        Problem(3, "add a2\n", None),
        Problem(4, "add a3\n", None),
    ]


def test_field_names_are_settable(tmp_path):
    path = write_lines(tmp_path / "q.jsonl", [json.dumps({"question": "2 + 2?", "solution": "#### 4"})])
    assert read_problems(path, "question", "solution") == [Problem(0, "2 + 2?", "#### 4")]


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"prompt": "a"}', '{"prompt": "b",}'], r"line 2: bad JSON"),
        (['{"prompt": "a"}', '["prompt"]'], r"line 2: expected a JSON object"),
        (
            ['{"prompt": "a"}', "", '{"question": "b"}'],
            r"line 3: no prompt field 'prompt' \(the record has: question\)",
        ),
        (['{"prompt": "  "}'], r"line 1: empty prompt"),
        (['{"prompt": 7}'], r"line 1: prompt field 'prompt' must be a string"),
        (['{"prompt": "a", "answer": [1]}'], r"line 1: answer field 'answer' must be a string or a number"),
        (["", "  "], r"holds no records"),
    ],
)
def test_bad_lines_give_clear_errors(tmp_path, lines, message):
    path = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(ValueError, match=message):
        read_problems(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl does not exist"):
        read_problems(tmp_path / "nope.jsonl")


def test_sampling_is_seeded_in_file_order_and_capped():
    problems = [Problem(i, f"p{i}", None) for i in range(100)]
    a = sample_problems(problems, 10, seed=1)
    assert a == sample_problems(problems, 10, seed=1) != sample_problems(problems, 10, seed=2)
    assert len(a) == 10 and [p.prompt_id for p in a] == sorted(p.prompt_id for p in a)
    assert sample_problems(problems, 500, seed=1) == problems
    with pytest.raises(ValueError, match="positive"):
        sample_problems(problems, 0, seed=1)


def test_builtin_rewards():
    assert {"exact", "numeric", "gsm8k"} <= set(known_rewards())
    assert get_reward("exact")("Paris", " Paris\n") == 1.0
    assert get_reward("exact")("Paris", "It is Paris") == 0.0
    assert get_reward("numeric")("18", "so $18.00.") == 1.0
    assert get_reward("gsm8k")("9 * 2 = 18\n#### 18", "The answer is: 18") == 1.0
    assert get_reward("gsm8k")("#### 18", "#### 17") == 0.0
    with pytest.raises(ValueError, match=r"unknown reward 'nope'; known rewards: exact"):
        get_reward("nope")


def test_task_reward_is_none_without_an_answer(tmp_path):
    path = write_lines(
        tmp_path / "p.jsonl", [json.dumps({"prompt": "q1", "answer": "7"}), json.dumps({"prompt": "q2"})]
    )
    task = JsonlTask(path, reward_name="numeric")
    with_answer, without = task.problems(2, seed=0)
    assert task.reward(with_answer, "#### 7") == 1.0 and task.reward(with_answer, "#### 8") == 0.0
    assert task.reward(without, "#### 7") is None
    with pytest.raises(ValueError, match="unknown reward"):
        JsonlTask(path, reward_name="nope")


def test_rollout_from_prompts_file(tmp_path):
    prompts = write_lines(
        tmp_path / "p.jsonl",
        [
            json.dumps({"text": "add a7 b5\n", "sum": "12"}),
            json.dumps({"text": "add a1 b2 c3\n", "sum": 6}),
            json.dumps({"text": "add a9\n"}),
        ],
    )
    out = tmp_path / "r.jsonl"
    assert (
        main(
            [
                "rollout",
                *SMALL,
                "--prompts",
                str(prompts),
                "--prompt-field",
                "text",
                "--answer-field",
                "sum",
                "--reward",
                "numeric",
                "--max-tokens",
                "48",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(r["prompt_id"], r["sample"]) for r in records} == {(p, s) for p in range(3) for s in range(2)}
    assert all(r["reward"] in (0.0, 1.0) for r in records if r["prompt_id"] < 2)
    assert all(r["reward"] is None for r in records if r["prompt_id"] == 2)
    # the bundled policy writes `answer N`, which the numeric reward reads: some samples must be right
    assert any(r["reward"] == 1.0 for r in records)


@pytest.mark.parametrize(
    "lines, flags, message",
    [
        (['{"prompt": "a"}', "oops"], [], "line 2: bad JSON"),
        (['{"q": "a"}'], [], "line 1: no prompt field 'prompt'"),
        (['{"prompt": ""}'], [], "line 1: empty prompt"),
        (['{"prompt": "a"}'], ["--reward", "nope"], "unknown reward 'nope'"),
        (['{"prompt": "a"}'], ["--task", "gsm8k"], "not both"),
    ],
)
def test_bad_prompts_give_clear_errors(tmp_path, capsys, lines, flags, message):
    prompts = write_lines(tmp_path / "p.jsonl", lines)
    assert (
        main(
            [
                "rollout",
                *SMALL,
                "--prompts",
                str(prompts),
                *flags,
                "--out",
                str(tmp_path / "r.jsonl"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert message in capsys.readouterr().err


def test_missing_prompts_file_gives_a_clear_error(tmp_path, capsys):
    assert main(["bench", *SMALL[:-2], "--prompts", str(tmp_path / "none.jsonl"), "--systems", "plain"]) == 2
    assert "none.jsonl does not exist" in capsys.readouterr().err
