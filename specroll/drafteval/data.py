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


def load_histories(path: str | Path) -> list[ProblemHistory]:
    """Rows `{prompt_id, prompt, step, response}`, grouped by problem in order of first appearance."""
    rows = _read_jsonl(path)
    if rows and "step" not in rows[0]:
        raise ValueError(f"{path}: rows have no 'step' field; is this a training-history file?")
    by_problem: dict[str, list[dict]] = {}
    for row in rows:
        by_problem.setdefault(str(row["prompt_id"]), []).append(row)
    return [_history(prompt_id, problem_rows) for prompt_id, problem_rows in by_problem.items()]


def _history(prompt_id: str, rows: list[dict]) -> ProblemHistory:
    rows = sorted(rows, key=lambda r: r["step"])
    return ProblemHistory(
        prompt_id,
        rows[0].get("prompt") or "",
        tuple(int(r["step"]) for r in rows),
        tuple(r["response"] for r in rows),
    )
