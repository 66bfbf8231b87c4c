"""The bundled default task: add a list of numbers, writing the running sum line by line.

Prompt and response, for the terms 7, 5 and 9 (the sum 21), with the default single-digit terms:

    add a7 b5 c9
    +a7=700
    +b5=210
    +c9=120
    answer 21

(`RunningSumTask(min_term=10, max_term=99, sum_width=4)` is the two-digit variant: harder, and with
the training budget of `scripts/train_default.py` the tiny policy reached a reward of only 0.006 on it.)

Each term carries a one-letter label (a..z, then A..Z) that the response repeats: finding the next
term is then a lookup of the next label, which a tiny model learns quickly, instead of an induction
over digit pairs that repeat across the list, which it did not learn in our training budget.

Each running sum is written least-significant digit first and zero-padded to `sum_width` digits, so
every digit the model writes depends only on digits a fixed distance back and on the carry it has
just produced; a tiny model learns that addition far faster than the usual most-significant-first
order. The final answer is written in the usual order.

Why this task suits speculative decoding of RL rollouts:
- the number of terms is log-uniform, so response lengths are heavy-tailed across prompts and
  shared within a prompt's group;
- responses repeat the prompt's terms (prompt-lookup drafting) and siblings share most of their
  text (grouped drafting);
- at temperature 1.0 a small model slips now and then, so samples differ and the reward, 1.0 for a
  correct final answer, stays well below 1 and can be improved by RL.
"""

from __future__ import annotations

import math
import random
import re
import string
from dataclasses import dataclass

from specroll.tasks.task import Problem

PROMPT_WORD = "add"
ANSWER_WORD = "answer"
TERM_LABELS = string.ascii_lowercase + string.ascii_uppercase  # the i-th term's label is TERM_LABELS[i]
_ANSWER_LINE = re.compile(rf"{ANSWER_WORD} (\d+)")


@dataclass(frozen=True)
class RunningSumTask:
    """Add `min_terms`..`max_terms` numbers in [min_term, max_term], the count drawn log-uniformly."""

    name: str = "running_sum"
    use_chat_template: bool = False  # the policy continues the raw prompt, as it was trained
    min_terms: int = 2
    max_terms: int = 48
    min_term: int = 1
    max_term: int = 9
    sum_width: int = 3  # digits of every running sum, zero-padded

    def __post_init__(self) -> None:
        if not 1 <= self.min_terms <= self.max_terms:
            raise ValueError(f"need 1 <= min_terms <= max_terms, got {self.min_terms}, {self.max_terms}")
        if self.max_terms > len(TERM_LABELS):
            raise ValueError(f"max_terms {self.max_terms} exceeds the {len(TERM_LABELS)} term labels")
        if not 0 <= self.min_term <= self.max_term:
            raise ValueError(f"need 0 <= min_term <= max_term, got {self.min_term}, {self.max_term}")
        if len(str(self.max_terms * self.max_term)) > self.sum_width:
            raise ValueError(f"sum_width {self.sum_width} cannot hold {self.max_terms} x {self.max_term}")

    def problems(self, num_problems: int, seed: int) -> list[Problem]:
        rng = random.Random(seed)
        return [self.make_problem(prompt_id, self.draw_terms(rng)) for prompt_id in range(num_problems)]

    def draw_terms(self, rng: random.Random) -> list[int]:
        # log-uniform count: most prompts are short, a few are long (heavy-tailed response lengths)
        log_count = rng.uniform(math.log(self.min_terms), math.log(self.max_terms + 1))
        num_terms = min(int(math.exp(log_count)), self.max_terms)
        return [rng.randint(self.min_term, self.max_term) for _ in range(num_terms)]

    def make_problem(self, prompt_id: int, terms: list[int]) -> Problem:
        labelled = " ".join(f"{label}{term}" for label, term in zip(TERM_LABELS, terms))
        prompt = f"{PROMPT_WORD} {labelled}\n"
        return Problem(prompt_id, prompt, str(sum(terms)), self.reference_response(terms))

    def reference_response(self, terms: list[int]) -> str:
        lines, total = [], 0
        for label, term in zip(TERM_LABELS, terms):
            total += term
            lines.append(f"+{label}{term}={self.format_running_sum(total)}\n")
        return "".join(lines) + f"{ANSWER_WORD} {total}"

    def format_running_sum(self, total: int) -> str:
        return str(total).zfill(self.sum_width)[::-1]

    def reward(self, problem: Problem, response_text: str) -> float:
        """1.0 iff the response ends with the line `answer N` and N is the correct sum."""
        last_line = response_text.strip().rsplit("\n", 1)[-1]
        match = _ANSWER_LINE.fullmatch(last_line.strip())
        return 1.0 if match is not None and int(match.group(1)) == int(problem.answer) else 0.0
