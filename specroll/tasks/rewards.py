"""Reward functions by name: `reward(answer, response_text) -> float`, for tasks built from data.

A JSONL task (`--prompts FILE --reward NAME`) scores each response against its record's answer with
the function registered under NAME. Add one with `register_reward`:

    register_reward("contains", lambda answer, text: float(answer in text))
"""

from __future__ import annotations

from typing import Callable

from specroll.tasks.answers import is_same_number
from specroll.tasks.registration import add_entry

RewardFn = Callable[[str, str], float]  # (answer, response_text) -> reward


def exact_match(answer: str, response_text: str) -> float:
    """1.0 when the response, stripped of surrounding whitespace, is the answer."""
    return 1.0 if response_text.strip() == answer.strip() else 0.0


def numeric_match(answer: str, response_text: str) -> float:
    """1.0 when the response's final number equals the answer's (see `specroll.tasks.answers`).

    The answer may be a bare number ("18") or a worked solution ending in one ("... #### 18").
    """
    return 1.0 if is_same_number(response_text, answer) else 0.0


_REWARDS: dict[str, RewardFn] = {"exact": exact_match, "numeric": numeric_match, "gsm8k": numeric_match}

DEFAULT_REWARD = "exact"


def known_rewards() -> list[str]:
    return sorted(_REWARDS)


def get_reward(name: str) -> RewardFn:
    if name not in _REWARDS:
        raise ValueError(f"unknown reward {name!r}; known rewards: {', '.join(known_rewards())}")
    return _REWARDS[name]


def register_reward(name: str, fn: RewardFn, *, replace: bool = False) -> None:
    """Make `fn(answer, response_text) -> float` available as the reward `name`."""
    add_entry(_REWARDS, "reward", name, fn, "must be callable as fn(answer, response_text)", replace)
