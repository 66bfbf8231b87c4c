"""A rollout JSONL as training data for a draft head: each record's response with its prompt's ids.

A record names its prompt by `prompt_id`; the prompts are rebuilt from the workload that produced the
rollout (the same task, seed and number of prompts), in the checkpoint's chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specroll.rollout import RolloutConfig, encode_prompts, load_problems
from specroll.tokenizer import load_tokenizer


@dataclass(frozen=True)
class Responses:
    prompts: list[tuple[int, ...]]
    responses: list[list[int]]
    rewards: list[float]
    request_ids: list[int]  # the engine's ids (-1 where a record has none): keys of the sampling noise


def read_responses(
    path: Path, config: RolloutConfig, exclude_prompt_ids: frozenset[int] = frozenset()
) -> Responses:
    """The records of `path` with a non-empty response, except those of `exclude_prompt_ids` (held
    out, e.g. the problems a benchmark measures on)."""
    task, problems = load_problems(config)
    prompts = encode_prompts(load_tokenizer(config.model_dir), task, problems)
    out = Responses([], [], [], [])
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        prompt_id = record.get("prompt_id")
        if prompt_id not in prompts:
            raise ValueError(
                f"{path}:{number}: prompt_id {prompt_id} is not among this workload's problems "
                f"(give the --task, --num-prompts and --seed the rollout ran with)"
            )
        if prompt_id in exclude_prompt_ids or not record.get("token_ids"):
            continue
        out.prompts.append(prompts[prompt_id])
        out.responses.append(list(record["token_ids"]))
        out.rewards.append(float(record.get("reward") or 0.0))
        out.request_ids.append(int(record.get("request_id", -1)))
    if not out.responses:
        raise ValueError(f"{path} has no responses to train on")
    return out
