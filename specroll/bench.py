"""Side-by-side systems on one workload, in one process, so ratios hold on a noisy machine."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from specroll.baselines.hf_generate import hf_generate
from specroll.rollout import RolloutConfig, run_rollout
from specroll.tasks import get_task
from specroll.tokenizer import load_tokenizer


@dataclass(frozen=True)
class BenchRow:
    system: str
    makespan_s: float
    output_tokens: int
    tokens_per_s: float
    mean_acceptance_length: float | None = None
    forward_passes: int | None = None


def engine_row(system: str, config: RolloutConfig) -> BenchRow:
    s = run_rollout(config).summary
    return BenchRow(system, s.makespan_s, s.output_tokens, s.tokens_per_s, s.mean_acceptance_length,
                    s.forward_passes)


def hf_generate_row(config: RolloutConfig) -> BenchRow:
    tokenizer = load_tokenizer(config.model_dir)
    problems = get_task(config.task).problems(config.num_prompts, config.seed)
    prompts = [tokenizer.encode(p.prompt) for p in problems for _ in range(config.n)]
    run = hf_generate(config.model_dir, prompts, config.max_tokens, config.temperature, config.top_k,
                      config.top_p, config.max_batch_size, config.seed)
    return BenchRow("hf-generate", run.makespan_s, run.output_tokens, run.output_tokens / run.makespan_s)


SYSTEMS: dict[str, Callable[[RolloutConfig], BenchRow]] = {
    "plain": lambda config: engine_row("plain", replace(config, speculate="off")),
    "speculative": lambda config: engine_row("speculative", replace(config, speculate="on")),
    "hf-generate": hf_generate_row,
}


def run_bench(config: RolloutConfig, systems: list[str], warmup: bool = True) -> list[BenchRow]:
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    if warmup:  # first-call costs (allocator, kernels, imports) are not any system's
        run_rollout(replace(config, num_prompts=1, n=2, max_tokens=8))
    return [SYSTEMS[name](config) for name in systems]
