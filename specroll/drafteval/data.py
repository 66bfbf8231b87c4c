"""Recorded rollouts as JSONL: groups of same-prompt responses, or one problem across training steps."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GroupRecord:
    """The responses sampled for one prompt, in file order."""

    prompt_id: str
    prompt: str  # "" when not recorded
    responses: tuple[str, ...]


@dataclass(frozen=True)
class ProblemHistory:
    """One problem's responses at successive training steps, oldest first."""

    prompt_id: str
    prompt: str
    steps: tuple[int, ...]
    responses: tuple[str, ...]


def _read_jsonl(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_groups(path: str | Path) -> list[GroupRecord]:
    """Rows `{prompt_id, prompt, responses: [...]}`."""
    rows = _read_jsonl(path)
    if rows and "responses" not in rows[0]:
        raise ValueError(f"{path}: rows have no 'responses' field; is this a grouped file?")
    return [GroupRecord(str(r["prompt_id"]), r.get("prompt") or "", tuple(r["responses"])) for r in rows]


PROBLEM_ORDERS = ("sorted", "file")


def load_histories(path: str | Path, order: str = "sorted") -> list[ProblemHistory]:
    """Rows `{prompt_id, prompt, step, response}`, grouped by problem.

    order: "sorted" lists problems by prompt_id (as strings: "p-10" before "p-2"), the selection under
    which the data README's history reference figures are reproduced; "file" by first appearance.
    """
    if order not in PROBLEM_ORDERS:
        raise ValueError(f"order must be one of {PROBLEM_ORDERS}, got {order!r}")
    rows = _read_jsonl(path)
    if rows and "step" not in rows[0]:
        raise ValueError(f"{path}: rows have no 'step' field; is this a training-history file?")
    by_problem: dict[str, list[dict]] = {}
    for row in rows:
        by_problem.setdefault(str(row["prompt_id"]), []).append(row)
    prompt_ids = sorted(by_problem) if order == "sorted" else list(by_problem)
    return [_history(prompt_id, by_problem[prompt_id]) for prompt_id in prompt_ids]


def _history(prompt_id: str, rows: list[dict]) -> ProblemHistory:
    rows = sorted(rows, key=lambda r: r["step"])
    return ProblemHistory(
        prompt_id,
        rows[0].get("prompt") or "",
        tuple(int(r["step"]) for r in rows),
        tuple(r["response"] for r in rows),
    )
