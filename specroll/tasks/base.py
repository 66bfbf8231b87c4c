"""The contract every task fulfils: problems to prompt the policy with, and a rule-based reward.

A task is pure Python (no torch), so rollout bookkeeping, reward computation and tests run anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Problem:
    """One prompt of a task.

    prompt:             the text given to the model; the response follows it directly.
    answer:             the correct final answer, as the reward compares it.
    reference_response: a correct response in the task's format, used to train the bundled policy;
                        empty when the task has none.
    """

    prompt_id: int
    prompt: str
    answer: str
    reference_response: str = ""

    def __post_init__(self) -> None:
        if self.prompt_id < 0:
            raise ValueError(f"prompt_id must be >= 0, got {self.prompt_id}")
        if not self.prompt:
            raise ValueError("prompt must not be empty")


@runtime_checkable
class Task(Protocol):
    """A verifiable task: deterministic problems and a pure, rule-based reward."""

    name: str

    def problems(self, num_problems: int, seed: int) -> list[Problem]:
        """`num_problems` problems, the same ones for the same seed."""
        ...

    def reward(self, problem: Problem, response_text: str) -> float:
        """1.0 when the response's final answer is correct, else 0.0."""
        ...
