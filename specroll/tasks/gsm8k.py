"""GSM8K: grade-school maths word problems, each with a numeric answer.

The data is the GSM8K test set (1,319 problems) of openai/grade-school-math (Cobbe et al. 2021,
"Training Verifiers to Solve Math Word Problems"; MIT licence), bundled unchanged as
`specroll/tasks/data/gsm8k_test.jsonl.gz` with its licence beside it. `path`, or the file the
environment variable `SPECROLL_GSM8K` names, reads another copy (plain or gzipped JSON lines).

Each record's `answer` is a worked solution ending in `#### N`; N is the problem's answer and the
solution (without its `<<calculator>>` annotations) its reference response. The prompt is the
question plus an instruction to end with `#### N`, a format small instruct models follow; the
reward also reads "The answer is N" and, failing both, the response's last number.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from specroll.tasks.answers import final_answer
from specroll.tasks.task import Problem
from specroll.tasks.jsonl import read_problems, sample_problems
from specroll.tasks.rewards import numeric_match

ENV_VAR = "SPECROLL_GSM8K"
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "gsm8k_test.jsonl.gz"
INSTRUCTION = 'Solve it step by step, then write the final answer as "#### <number>".'
_CALCULATOR = re.compile(r"<<[^>]*>>")


def gsm8k_path(path: str | Path | None = None) -> Path:
    """The GSM8K file to read: `path`, else $SPECROLL_GSM8K, else the bundled test set."""
    chosen = Path(path) if path is not None else Path(os.environ.get(ENV_VAR) or DEFAULT_PATH)
    if not chosen.is_file():
        raise FileNotFoundError(
            f"GSM8K data not found at {chosen}; set {ENV_VAR} to the path of "
            "gsm8k_test.jsonl (fields question, answer)"
        )
    return chosen


def format_prompt(question: str) -> str:
    return f"{question.strip()}\n{INSTRUCTION}"


def gold_answer(solution: str) -> str:
    """N from a GSM8K solution ending in `#### N`, commas removed ("#### 1,600" gives "1600")."""
    _, marker, tail = solution.rpartition("####")
    answer = final_answer(tail) if marker else None
    if answer is None:
        raise ValueError(f"GSM8K solution without a final '#### N': {solution[-80:]!r}")
    return answer


@dataclass(frozen=True)
class Gsm8kTask:
    """GSM8K test problems, drawn by seed; a problem's `prompt_id` is its line in the file."""

    path: Path | None = None  # None: $SPECROLL_GSM8K, else the bundled test set
    name: str = "gsm8k"
    use_chat_template: bool = True

    def problems(self, num_problems: int, seed: int) -> list[Problem]:
        records = sample_problems(
            read_problems(gsm8k_path(self.path), "question", "answer"), num_problems, seed
        )
        return [self.make_problem(r.prompt_id, r.prompt, r.answer or "") for r in records]

    def make_problem(self, prompt_id: int, question: str, solution: str) -> Problem:
        return Problem(
            prompt_id, format_prompt(question), gold_answer(solution), _CALCULATOR.sub("", solution)
        )

    def reward(self, problem: Problem, response_text: str) -> float:
        """1.0 when the response's final number equals the answer, else 0.0."""
        return numeric_match(problem.answer or "", response_text)
