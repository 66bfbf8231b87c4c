"""Measure the bundled policy as a rollout sees it: reward, response lengths, within-group structure.

    python scripts/measure_default.py                       # 64 prompts x 8 samples at T=1.0, + greedy

Samples `num_prompts` problems of the default task (a seed training never uses), draws
`samples_per_prompt` responses per prompt with plain ancestral sampling at temperature 1.0 (no top-k,
no top-p) and one greedy response per prompt, and prints the statistics `checkpoints/README.md` reports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from specroll.tasks import DEFAULT_TASK, Problem, get_task  # noqa: E402

EVAL_SEED = 2024  # training draws its problems from seeds 0, 1, 2, ... (one per chunk of 4096)


@dataclass(frozen=True)
class Rollout:
    """One prompt's sampled responses."""

    problem: Problem
    responses: list[str]
    lengths: list[int]  # generated tokens per response, the eos included
    rewards: list[float]


@dataclass(frozen=True)
class RolloutStats:
    reward_mean: float
    greedy_reward_mean: float
    length_p50: float
    length_p99: float
    length_p99_over_p50: float
    length_max: int
    within_group_length_icc: float  # share of length variance explained by the prompt
    sibling_length_correlation: float  # Pearson r of lengths over all pairs of siblings
    mean_distinct_responses_per_group: float
    mean_sibling_common_prefix: float  # characters two siblings share before they first differ
    fraction_truncated: float
    fraction_groups_mixed_reward: float  # groups with both a correct and a wrong sample


def generate(
    model, tokenizer, problems: list[Problem], num_samples: int, do_sample: bool, max_new_tokens: int
):
    """Responses (text, token count) for each problem, num_samples each, in problem order."""
    tokenizer.padding_side = "left"  # decoder-only: prompts end where generation starts
    batch = tokenizer(
        [p.prompt for p in problems], return_tensors="pt", padding=True, add_special_tokens=False
    )
    with torch.no_grad():
        output = model.generate(
            **batch,
            do_sample=do_sample,
            temperature=1.0 if do_sample else None,
            top_k=0 if do_sample else None,
            top_p=1.0 if do_sample else None,
            num_return_sequences=num_samples,
            max_new_tokens=max_new_tokens,
        )
    generated = output[:, batch["input_ids"].shape[1] :]  # (B * num_samples, T_new)
    return [response_of(row, tokenizer) for row in generated]


def response_of(token_ids: torch.Tensor, tokenizer) -> tuple[str, int]:
    ids = token_ids.tolist()
    length = ids.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in ids else len(ids)
    return tokenizer.decode(ids[:length], skip_special_tokens=True), length


def sample_rollouts(
    model, tokenizer, problems, num_samples, prompts_per_batch, max_new_tokens
) -> list[Rollout]:
    task, rollouts = get_task(DEFAULT_TASK), []
    ordered = sorted(problems, key=lambda p: len(p.prompt))  # similar lengths share a batch
    for start in range(0, len(ordered), prompts_per_batch):
        chunk = ordered[start : start + prompts_per_batch]
        samples = generate(model, tokenizer, chunk, num_samples, True, max_new_tokens)
        for index, problem in enumerate(chunk):
            mine = samples[index * num_samples : (index + 1) * num_samples]
            rewards = [task.reward(problem, text) for text, _ in mine]
            rollouts.append(Rollout(problem, [t for t, _ in mine], [n for _, n in mine], rewards))
    return sorted(rollouts, key=lambda r: r.problem.prompt_id)


def greedy_reward(model, tokenizer, problems, prompts_per_batch, max_new_tokens) -> float:
    task, rewards = get_task(DEFAULT_TASK), []
    ordered = sorted(problems, key=lambda p: len(p.prompt))
    for start in range(0, len(ordered), prompts_per_batch):
        chunk = ordered[start : start + prompts_per_batch]
        responses = generate(model, tokenizer, chunk, 1, False, max_new_tokens)
        rewards += [task.reward(problem, text) for problem, (text, _) in zip(chunk, responses)]
    return statistics.fmean(rewards)


def intraclass_correlation(groups: np.ndarray) -> float:
    """ICC(1) of a (num_groups, group_size) array, from the one-way ANOVA mean squares."""
    num_groups, group_size = groups.shape
    between = group_size * groups.mean(axis=1).var(ddof=1)
    within = groups.var(axis=1, ddof=1).mean()
    return float((between - within) / (between + (group_size - 1) * within))


def sibling_correlation(groups: np.ndarray) -> float:
    """Pearson r over every ordered pair (i, j), i != j, of samples of the same prompt."""
    pairs = [(row[i], row[j]) for row in groups for i in range(len(row)) for j in range(len(row)) if i != j]
    first, second = np.array(pairs, dtype=float).T
    return float(np.corrcoef(first, second)[0, 1])


def common_prefix(first: str, second: str) -> int:
    length = 0
    while length < min(len(first), len(second)) and first[length] == second[length]:
        length += 1
    return length


def mean_sibling_prefix(rollouts: list[Rollout]) -> float:
    prefixes = [
        common_prefix(r.responses[i], r.responses[j])
        for r in rollouts
        for i in range(len(r.responses))
        for j in range(i + 1, len(r.responses))
    ]
    return statistics.fmean(prefixes)


def summarize(rollouts: list[Rollout], greedy: float, max_new_tokens: int) -> RolloutStats:
    lengths = np.array([r.lengths for r in rollouts], dtype=float)  # (num_prompts, num_samples)
    p50, p99 = np.percentile(lengths, 50), np.percentile(lengths, 99)
    truncated = [
        n >= max_new_tokens and not text.rstrip().split("\n")[-1].startswith("answer")
        for r in rollouts
        for text, n in zip(r.responses, r.lengths)
    ]
    return RolloutStats(
        reward_mean=statistics.fmean(x for r in rollouts for x in r.rewards),
        greedy_reward_mean=greedy,
        length_p50=float(p50),
        length_p99=float(p99),
        length_p99_over_p50=float(p99 / p50),
        length_max=int(lengths.max()),
        within_group_length_icc=intraclass_correlation(lengths),
        sibling_length_correlation=sibling_correlation(lengths),
        mean_distinct_responses_per_group=statistics.fmean(len(set(r.responses)) for r in rollouts),
        mean_sibling_common_prefix=mean_sibling_prefix(rollouts),
        fraction_truncated=statistics.fmean(truncated),
        fraction_groups_mixed_reward=statistics.fmean(0 < sum(r.rewards) < len(r.rewards) for r in rollouts),
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=REPO_ROOT / "checkpoints" / "policy")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--prompts-per-batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--show", type=int, default=2, help="groups to print in full")
    parser.add_argument("--num-threads", type=int, default=2)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.num_threads)
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, local_files_only=True).eval()
    problems = get_task(DEFAULT_TASK).problems(args.num_prompts, seed=EVAL_SEED)
    started = time.time()
    rollouts = sample_rollouts(
        model, tokenizer, problems, args.samples_per_prompt, args.prompts_per_batch, args.max_new_tokens
    )
    greedy = greedy_reward(model, tokenizer, problems, args.prompts_per_batch, args.max_new_tokens)
    for rollout in rollouts[: args.show]:
        print(
            f"--- prompt {rollout.problem.prompt_id}: {rollout.problem.prompt!r} "
            f"answer {rollout.problem.answer}"
        )
        for text, reward in zip(rollout.responses[:3], rollout.rewards):
            print(f"[reward {reward}]\n{text}")
    stats = summarize(rollouts, greedy, args.max_new_tokens)
    print(json.dumps({**asdict(stats), "seconds": round(time.time() - started, 1)}, indent=2))


if __name__ == "__main__":
    main()
