"""The contract every task fulfils: problems to prompt the policy with, and a rule-based reward.

A task is pure Python (no torch), so rollout bookkeeping, reward computation and tests run anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Problem:
    """One prompt of a task.

    prompt_id:          the problem's identity within its task, stable across calls and RL steps (a
                        data set's line index), so that the same problem recurs under the same id.
    prompt:             the text given to the model: raw, or as a user message in the checkpoint's chat
                        template when the task uses one (see `Task.use_chat_template`).
    answer:             the correct final answer, as the reward compares it; None when there is none
                        to compare with (the reward is then None).
    reference_response: a correct response in the task's format, used to train the bundled policy;
                        empty when the task has none.
    """

    prompt_id: int
    prompt: str
    answer: str | None
    reference_response: str = ""

    def __post_init__(self) -> None:
        if self.prompt_id < 0:
            raise ValueError(f"prompt_id must be >= 0, got {self.prompt_id}")
        if not self.prompt:
            raise ValueError("prompt must not be empty")


@runtime_checkable
class Task(Protocol):
    """A verifiable task: deterministic problems and a pure, rule-based reward.

    use_chat_template: True when a checkpoint with a chat template should see each prompt as a user
    message in it; False when the prompt is the raw text the model continues (the bundled task).
    """

    name: str
    use_chat_template: bool

    def problems(self, num_problems: int, seed: int) -> list[Problem]:
        """Up to `num_problems` problems (fewer when the task has fewer), the same ones for the same seed."""
        ...

    def reward(self, problem: Problem, response_text: str) -> float | None:
        """1.0 when the response's final answer is correct, else 0.0; None when the problem has no answer."""
        ...
