"""Side-by-side systems on one workload, in one process, so ratios hold on a noisy machine.

Systems: `plain` (this engine, no speculation), `speculative` (the default drafter and policy),
`speculative:<policy>` (the default drafter under another policy), `oracle` (the default policy
with drafts replayed from the plain rollout: the most any drafter can gain under it) and
`hf-generate` (Hugging Face `transformers` `generate` on the same checkpoint and batch size).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specroll.baselines.hf_generate import hf_generate
from specroll.drafting.oracle import OracleDrafter
from specroll.rollout import RolloutConfig, RolloutResult, apply_threads, run_rollout
from specroll.tasks import get_task
from specroll.tokenizer import load_tokenizer

DEFAULT_SYSTEMS = ("plain", "speculative", "hf-generate")


@dataclass(frozen=True)
class BenchRow:
    system: str
    makespan_s: float
    output_tokens: int
    tokens_per_s: float
    mean_acceptance_length: float | None = None
    forward_passes: int | None = None


class Bench:
    def __init__(self, config: RolloutConfig) -> None:
        self.config = config
        self._plain: RolloutResult | None = None
        apply_threads(config)  # every system, hf-generate included, runs with the same threads

    def row(self, system: str) -> BenchRow:
        name, _, policy = system.partition(":")
        runs = {"plain": self._plain_row, "speculative": self._speculative_row, "oracle": self._oracle_row,
                "hf-generate": self._hf_generate_row}
        if name not in runs or (policy and name != "speculative"):
            raise ValueError(f"unknown system {system!r}; known: plain, speculative, speculative:<policy>, "
                             "oracle, hf-generate")
        return runs[name](policy) if name == "speculative" else runs[name]()

    def _plain_row(self) -> BenchRow:
        return _engine_row("plain", self.plain())

    def _speculative_row(self, policy: str) -> BenchRow:
        config = replace(self.config, speculate="on", policy=policy or self.config.policy)
        return _engine_row(f"speculative:{policy}" if policy else "speculative", run_rollout(config))

    def _oracle_row(self) -> BenchRow:
        outputs = {r.request_id: r.token_ids for r in self.plain().records}
        # the oracle drafts for free, so policies see a model-free drafter's costs
        return _engine_row("oracle", run_rollout(replace(self.config, speculate="suffix"), drafter=OracleDrafter(outputs)))

    def plain(self) -> RolloutResult:
        if self._plain is None:
            self._plain = run_rollout(replace(self.config, speculate="off"))
        return self._plain

    def _hf_generate_row(self) -> BenchRow:
        config = self.config
        tokenizer = load_tokenizer(config.model_dir)
        problems = get_task(config.task).problems(config.num_prompts, config.seed)
        prompts = [tokenizer.encode(p.prompt) for p in problems for _ in range(config.n)]
        run = hf_generate(config.model_dir, prompts, config.max_tokens, config.temperature, config.top_k,
                          config.top_p, config.max_batch_size, config.seed)
        return BenchRow("hf-generate", run.makespan_s, run.output_tokens, run.output_tokens / run.makespan_s)


def _engine_row(system: str, result: RolloutResult) -> BenchRow:
    s = result.summary
    return BenchRow(system, s.makespan_s, s.output_tokens, s.tokens_per_s, s.mean_acceptance_length,
                    s.forward_passes)


def run_bench(config: RolloutConfig, systems: list[str], warmup: bool = True) -> list[BenchRow]:
    if warmup:  # first-call costs (allocator, kernels, imports) are not any system's
        run_rollout(replace(config, num_prompts=1, n=2, max_tokens=8))
    bench = Bench(config)
    return [bench.row(name) for name in systems]
