"""A task from a JSONL file of prompts: one JSON object per line, scored by a named reward.

    {"prompt": "What is 7 + 5?", "answer": "12"}

`prompt_field` and `answer_field` name the fields to read. A record without the answer field
(or with a null answer) still runs; its reward is None. A problem's `prompt_id` is its line index
(0-based, counting blank lines), so the same record keeps its id across RL steps.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path

from specroll.tasks.task import Problem
from specroll.tasks.rewards import DEFAULT_REWARD, get_reward


def read_problems(
    path: str | Path, prompt_field: str = "prompt", answer_field: str = "answer"
) -> list[Problem]:
    """Every record of the file as a problem; a bad line raises ValueError naming its number."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompts file {path} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    problems = [
        _problem(path, index, line, prompt_field, answer_field)
        for index, line in enumerate(lines)
        if line.strip()
    ]
    if not problems:
        raise ValueError(f"prompts file {path} holds no records")
    return problems


def _problem(path: Path, index: int, line: str, prompt_field: str, answer_field: str) -> Problem:
    where = f"{path}, line {index + 1}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: bad JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    if prompt_field not in record:
        raise ValueError(
            f"{where}: no prompt field {prompt_field!r} (the record has: {', '.join(record) or 'nothing'})"
        )
    prompt = record[prompt_field]
    if not isinstance(prompt, str):
        raise ValueError(
            f"{where}: prompt field {prompt_field!r} must be a string, got {type(prompt).__name__}"
        )
    if not prompt.strip():
        raise ValueError(f"{where}: empty prompt")
    return Problem(index, prompt, _answer(where, record.get(answer_field), answer_field))


def _answer(where: str, value: object, answer_field: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(
            f"{where}: answer field {answer_field!r} must be a string or a number, got {type(value).__name__}"
        )
    return str(value)


def sample_problems(problems: list[Problem], num_problems: int, seed: int) -> list[Problem]:
    """`num_problems` of them drawn without replacement by `seed`, in file order; all when there are
    no more than that."""
    if num_problems <= 0:
        raise ValueError(f"num_problems must be positive, got {num_problems}")
    if num_problems >= len(problems):
        return list(problems)
    chosen = sorted(random.Random(seed).sample(range(len(problems)), num_problems))
    return [problems[i] for i in chosen]


@dataclass(frozen=True)
class JsonlTask:
    """Prompts from `path`, each response scored against its answer by the reward named `reward`."""

    path: Path
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    reward_name: str = DEFAULT_REWARD
    use_chat_template: bool = True
    name: str = "jsonl"

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))  # a str is welcome too
        if not self.prompt_field or not self.answer_field:
            raise ValueError("prompt_field and answer_field must be non-empty")
        get_reward(self.reward_name)  # an unknown name fails here, before any generation

    def problems(self, num_problems: int, seed: int) -> list[Problem]:
        return sample_problems(
            read_problems(self.path, self.prompt_field, self.answer_field), num_problems, seed
        )

    def reward(self, problem: Problem, response_text: str) -> float | None:
        if problem.answer is None:
            return None
        return float(get_reward(self.reward_name)(problem.answer, response_text))
