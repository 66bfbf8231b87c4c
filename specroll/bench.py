"""Side-by-side systems on one workload, in one process, so ratios hold on a noisy machine.

Systems: `plain` (this engine, no speculation), `speculative` (the default drafter and policy),
`speculative:<policy>` (another policy), `speculative/<drafter>` and `speculative:<policy>/<drafter>`
(another drafter), any of these with `@<head dir>` (drafting with that draft head, so that two heads run
side by side in one paired bench), `oracle[:<policy>]` (drafts replayed from the plain rollout: the most
any drafter can gain under that policy), `plain-fast` (plain with the fast numerics: what
batch-invariant numerics cost), `plain-serial` (plain with each step read back before the next is
launched: what overlap buys), `plain-eager` (plain with every forward dynamic and eager: what
`--cuda-graphs` buys), `hf-generate` (Hugging Face `transformers` `generate` on the same checkpoint and
batch size), `vllm` and `vllm:<ngram|suffix>` (vLLM's offline engine, plain or with that speculative
method, in a child process in the environment `make vllm-peer` builds; its start-up apart) and
`workers:<dispatch>[+fon][/<speculate>]` (the rollout over `--workers` engines on Ray under that
dispatch, `+fon` with Fastest-of-N copies; plain decoding unless a drafter, or `on`, is named). Every
other system runs one engine.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

import torch

from specroll.baselines.hf_generate import hf_generate
from specroll.baselines.vllm_peer import VllmRun, VllmWorkload, has_method, run_vllm, vllm_python
from specroll.bench_systems import parse_system, split_head
from specroll.drafting.oracle import OracleDrafter
from specroll.engine.engine import Engine
from specroll.engine.threads import apply_threads
from specroll.engine.telemetry import drafts_by_batch, forward_from_row
from specroll.policies.cost_model import CostModel
from specroll.rollout import (
    RolloutConfig,
    RolloutResult,
    RolloutSummary,
    encode_prompts,
    load_cost_model,
    load_problems,
    run_rollout,
)
from specroll.sim.prediction import MeasuredRollout, predict_engine_makespan, predict_makespan, scaled
from specroll.sim.projection import project
from specroll.tail import BatchSample, tail_profile
from specroll.tokenizer import load_tokenizer

DEFAULT_SYSTEMS = ("plain", "speculative", "hf-generate")


@dataclass(frozen=True)
class BenchRow:
    """One system's figures. Over several rounds: the median makespan (tokens_per_second follows from it),
    every round's makespan, and the median over rounds of this system's tokens/s over plain's in the
    same round (paired, so that the machine's drift between rounds cancels)."""

    system: str
    makespan_seconds: float
    output_tokens: int
    tokens_per_second: float
    mean_acceptance_length: float | None = None
    forward_passes: int | None = None
    makespans_seconds: list[float] = field(default_factory=list)
    paired_vs_plain: float | None = None
    paired_vs_first: float | None = None  # the same, over the first system listed
    paired_rounds_vs_plain: list[float] = field(default_factory=list)  # each round's ratio, in order
    predicted_makespan_seconds: float | None = None  # workers and plain: the simulator's, on these requests
    scaled_makespan_seconds: float | None = None  # workers: the same on the profile scaled to plain's level
    graph_recording_seconds: float | None = None  # recording CUDA graphs, inside the makespan
    tail_seconds: float | None = None  # from 90 % of requests finished to the last (median over rounds)
    tail_share: float | None = None  # that over the makespan (`tail.tail_share`; median over rounds)
    drain_share: float | None = None  # the batch only shrinking, over the makespan (`tail.tail_profile`)
    batch_at: dict[str, int] = field(default_factory=dict)  # "50%" -> the batch then (the first round's)
    drafts_by_batch: dict[str, dict[str, int]] = field(default_factory=dict)  # summed over rounds
    projected_makespan_seconds: float | None = None  # its forwards priced by another device's profile
    startup_seconds: float | None = None  # vllm: building its engine and a warm-up, outside the makespan


def check_system(system: str, config: RolloutConfig) -> None:
    """Fails, naming the problem, on a system that could not run: before any round runs."""
    core, head = split_head(system)
    name, method, _ = parse_system(core)
    if name == "vllm":
        _check_vllm(system, method)
    if head is not None and not replace(config, draft_head_dir=head).has_head:
        raise ValueError(f"system {system!r}: {head} holds no draft head for {config.model_dir}")


def _check_vllm(system: str, method: str) -> None:
    if vllm_python() is None:
        raise ValueError(f"system {system!r}: vLLM's environment is missing (`make vllm-peer` builds it)")
    if not has_method(method):
        raise ValueError(f"system {system!r}: vLLM's environment lacks arctic-inference (suffix decoding)")


class Bench:
    def __init__(self, config: RolloutConfig, projection: CostModel | None = None) -> None:
        self.projection = projection  # another device's profile, to price each engine run's forwards
        self.num_workers = config.cluster.num_workers
        self.config = config = config.with_cluster(num_workers=1)
        self._plain: RolloutResult | None = None
        self._plain_batches: list[BatchSample] = []  # its iterations (`BatchClock`)
        self._prompts: dict[int, tuple[int, ...]] | None = None
        self._replays: dict[str, tuple[MeasuredRollout, str]] = {}  # workers system -> its requests, dispatch
        apply_threads(config.engine_spec())  # every system, hf-generate included, runs with the same threads

    def row(self, system: str) -> BenchRow:
        core, head = split_head(system)
        name, policy, drafter = parse_system(core)
        if name == "speculative":
            return self._engine_row(system, *self._speculative_row(policy, drafter, head))
        if name == "oracle":
            return self._engine_row(system, *self._oracle_row(policy))
        if name == "workers":
            result = self._workers_row(policy, drafter)
            return replace(
                _engine_row(system, result),
                predicted_makespan_seconds=self._predict(system, result, policy, drafter),
            )
        plain = replace(self.config, speculate="off")
        if name == "plain-fast":
            return self._engine_row(system, *_run(plain.with_engine(batch_invariant=False)))
        if name == "plain-serial":
            return self._engine_row(system, *_run(plain.with_engine(overlap=False)))
        if name == "plain-eager":
            return self._engine_row(system, *_run(plain.with_engine(cuda_graphs=False)))
        if name == "vllm":
            return _vllm_row(system, run_vllm(self._vllm_workload(), method=policy))
        return self._plain_row() if name == "plain" else self._hf_generate_row()

    def _plain_row(self) -> BenchRow:
        cost = load_cost_model(self.config)
        predicted = (
            None
            if cost is None
            else predict_engine_makespan(
                self._measured(self.plain()), self.config.engine.max_batch_size, cost
            )
        )
        row = self._engine_row("plain", self.plain(), self._plain_batches)
        return replace(row, predicted_makespan_seconds=predicted)

    def _engine_row(
        self, system: str, result: RolloutResult, batches: list[BatchSample] | None = None
    ) -> BenchRow:
        """One engine's row, with its forwards priced by the projection's profile where one is given."""
        row = _engine_row(system, result, batches)
        if self.projection is None:
            return row
        prompts = self._encoded_prompts()
        prompt_tokens = {r.request_id: len(prompts[r.prompt_id]) for r in result.records}
        forwards = [forward_from_row(f) for f in result.telemetry]
        projected = project(forwards, prompt_tokens, self.projection).makespan_seconds
        return replace(row, projected_makespan_seconds=projected)

    def scaled(self, rows: list[BenchRow]) -> list[BenchRow]:
        """This round's rows, each workers system's with its replay on the profile scaled to the level
        the plain run of this round measured (its makespan over its replay); as they were without one."""
        plain = next((r for r in rows if r.system == "plain" and r.predicted_makespan_seconds), None)
        cost = load_cost_model(self.config)
        if plain is None or cost is None:
            return rows
        level = scaled(cost, plain.makespan_seconds / plain.predicted_makespan_seconds)
        return [
            replace(r, scaled_makespan_seconds=self._replay(*self._replays[r.system], level))
            if r.system in self._replays
            else r
            for r in rows
        ]

    def _speculative_row(
        self, policy: str, drafter: str, head: Path | None = None
    ) -> tuple[RolloutResult, list[BatchSample]]:
        config = replace(self.config, speculate=drafter or "on", policy=policy or self.config.policy)
        return _run(config if head is None else replace(config, draft_head_dir=head))

    def _workers_row(self, dispatch: str, drafter: str) -> RolloutResult:
        if self.num_workers < 2:
            raise ValueError("workers:<dispatch> systems need --workers 2 or more")
        config = self.config.with_cluster(
            num_workers=self.num_workers,
            dispatch=dispatch.removesuffix("+fon"),
            fastest_of_n=dispatch.endswith("+fon"),
        )
        return run_rollout(replace(config, speculate=drafter or "off"))

    def _predict(self, system: str, result: RolloutResult, dispatch: str, drafter: str) -> float | None:
        """The simulator's makespan for these requests under this dispatch, on the profiled cost model
        (None without a profile for the checkpoint, or for a speculative run: it predicts plain decoding)."""
        cost = load_cost_model(self.config)
        if cost is None or drafter or dispatch.endswith("+fon"):
            return None  # the replay simulates plain decoding, without copies
        self._replays[system] = (self._measured(result), dispatch)
        return self._replay(*self._replays[system], cost)

    def _replay(self, measured: MeasuredRollout, dispatch: str, cost: CostModel) -> float:
        cluster = replace(self.config.cluster, num_workers=self.num_workers, dispatch=dispatch)
        return predict_makespan(
            measured,
            dispatch,
            self.num_workers,
            self.config.engine.max_batch_size,
            cluster.chunk_size(self.config.max_tokens),
            cost,
            self.config.engine.seed,
        )

    def _measured(self, result: RolloutResult) -> MeasuredRollout:
        prompts = self._encoded_prompts()
        prompt_tokens = [len(prompts[r.prompt_id]) for r in result.records]
        return MeasuredRollout.from_records(result.records, prompt_tokens, self.config.max_tokens)

    def _oracle_row(self, policy: str) -> tuple[RolloutResult, list[BatchSample]]:
        outputs = {r.request_id: r.token_ids for r in self.plain().records}
        # the oracle drafts for free, so policies see a model-free drafter's costs
        config = replace(self.config, speculate="suffix", policy=policy or self.config.policy)
        return _run(config, OracleDrafter(outputs))

    def plain(self) -> RolloutResult:
        if self._plain is None:
            self._plain, self._plain_batches = _run(replace(self.config, speculate="off"))
        return self._plain

    def _encoded_prompts(self) -> dict[int, tuple[int, ...]]:
        if self._prompts is None:
            task, problems = load_problems(self.config)
            self._prompts = encode_prompts(load_tokenizer(self.config.model_dir), task, problems)
        return self._prompts

    def _vllm_workload(self) -> VllmWorkload:
        config = self.config
        return VllmWorkload(
            config.model_dir,
            [list(ids) for ids in self._encoded_prompts().values()],
            config.n,
            config.max_tokens,
            config.temperature,
            config.top_k,
            config.top_p,
            list(load_tokenizer(config.model_dir).stop_token_ids),
            config.engine.max_batch_size,
            config.engine.seed,
            config.engine.dtype,
            torch.get_num_threads(),  # as `apply_threads` chose for every system
        )

    def _hf_generate_row(self) -> BenchRow:
        config = self.config
        prompts = [list(ids) for ids in self._encoded_prompts().values() for _ in range(config.n)]
        run = hf_generate(
            config.model_dir,
            prompts,
            config.max_tokens,
            config.temperature,
            config.top_k,
            config.top_p,
            config.engine.max_batch_size,
            config.engine.seed,
            config.engine.device,
            config.engine.dtype,
        )
        return BenchRow(
            "hf-generate", run.makespan_seconds, run.output_tokens, run.output_tokens / run.makespan_seconds
        )


def _vllm_row(system: str, run: VllmRun) -> BenchRow:
    return BenchRow(
        system,
        run.makespan_seconds,
        run.output_tokens,
        run.output_tokens / run.makespan_seconds,
        mean_acceptance_length=run.mean_acceptance_length,
        startup_seconds=run.startup_seconds,
    )


class BatchClock:
    """A rollout's `progress` hook: each engine iteration's end on the wall clock, its batch and queue."""

    def __init__(self) -> None:
        self._ends: list[tuple[float, int, int, int]] = []  # perf_counter, batch, finished, waiting
        self._num_finished = 0

    def __call__(self, engine: Engine, num_finished: int, output_tokens: int) -> None:
        finished, self._num_finished = num_finished - self._num_finished, num_finished
        # the requests it finished have left the running set: the batch it ran had them too
        self._ends.append((time.perf_counter(), engine.num_running + finished, finished, engine.num_waiting))

    def samples(self, makespan_seconds: float) -> list[BatchSample]:
        """On the rollout's clock: its makespan closes just after the last iteration's hook, so an
        iteration ended `makespan - (last end - its end)` seconds after the start."""
        if not self._ends:
            return []
        last = self._ends[-1][0]
        return [BatchSample(makespan_seconds - (last - end), *rest) for end, *rest in self._ends]


def _run(
    config: RolloutConfig, drafter: OracleDrafter | None = None
) -> tuple[RolloutResult, list[BatchSample]]:
    """One engine's rollout, and its iterations as `BatchClock` saw them."""
    clock = BatchClock()
    result = run_rollout(config, clock, drafter)
    return result, clock.samples(result.summary.makespan_seconds)


def _engine_row(system: str, result: RolloutResult, batches: list[BatchSample] | None = None) -> BenchRow:
    """`batches`: the rollout's iterations, where its one engine ran it (none for workers)."""
    s = result.summary
    profile = None if not batches else tail_profile(batches, s.makespan_seconds)
    return BenchRow(
        system,
        s.makespan_seconds,
        s.output_tokens,
        s.tokens_per_second,
        s.mean_acceptance_length,
        s.forward_passes,
        graph_recording_seconds=s.graph_recording_seconds if s.graphs_recorded else None,
        tail_seconds=s.tail_seconds,
        tail_share=_tail_share(s) if profile is None else profile.tail_share,
        drain_share=None if profile is None else profile.drain_share,
        batch_at={} if profile is None else profile.batch_at,
        drafts_by_batch=drafts_by_batch(map(forward_from_row, result.telemetry)),
    )


def _tail_share(summary: RolloutSummary) -> float | None:
    """The tail's share from the summary alone (a rollout over workers: no iterations to read)."""
    return summary.tail_seconds / summary.makespan_seconds if summary.makespan_seconds else None


def run_bench(
    config: RolloutConfig,
    systems: list[str],
    warmup: bool = True,
    repeats: int = 1,
    on_row: Callable[[int, BenchRow], None] | None = None,
    on_start: Callable[[int, str], None] | None = None,
    projection: CostModel | None = None,
) -> list[BenchRow]:
    """Every system once per round, in the given order, for `repeats` rounds (A B C A B C ...);
    `on_start(round, system)` as each system's run of a round begins (round 0: the warm-up) and
    `on_row(round, row)` as it ends. `projection`: another device's profile, by which each engine
    run's forwards are priced too (`sim.projection`)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for system in systems:
        check_system(system, config)  # a typo fails before anything runs
    if warmup:  # first-call costs (allocator, kernels, imports) are not any system's
        if on_start is not None:
            on_start(0, "warm-up")
        run_rollout(replace(config.with_cluster(num_workers=1), num_prompts=1, n=2, max_tokens=8))
    rounds = []
    for number in range(1, repeats + 1):
        bench = Bench(config, projection)
        rows = []
        for name in systems:
            if on_start is not None:
                on_start(number, name)
            rows.append(bench.row(name))
            if on_row is not None:
                on_row(number, rows[-1])
        rounds.append(bench.scaled(rows))
    return [_combined([r[i] for r in rounds], rounds) for i in range(len(systems))]


def _combined(rows: list[BenchRow], rounds: list[list[BenchRow]]) -> BenchRow:
    """One system over rounds: median makespan, and its tokens/s over plain's round by round."""
    makespans = [r.makespan_seconds for r in rows]
    median = statistics.median(makespans)
    plain = [next((p for p in round_ if p.system == "plain"), None) for round_ in rounds]
    ratios = [
        r.tokens_per_second / p.tokens_per_second
        for r, p in zip(rows, plain)
        if p is not None and p.tokens_per_second
    ]
    firsts = [r.tokens_per_second / round_[0].tokens_per_second for r, round_ in zip(rows, rounds)]
    return replace(
        rows[0],
        makespan_seconds=median,
        tokens_per_second=rows[0].output_tokens / median,
        makespans_seconds=makespans,
        mean_acceptance_length=_median_of(r.mean_acceptance_length for r in rows),
        forward_passes=_median_of(r.forward_passes for r in rows),
        paired_vs_plain=statistics.median(ratios) if ratios else None,
        paired_vs_first=statistics.median(firsts),
        paired_rounds_vs_plain=ratios,
        predicted_makespan_seconds=_median_of(r.predicted_makespan_seconds for r in rows),
        scaled_makespan_seconds=_median_of(r.scaled_makespan_seconds for r in rows),
        graph_recording_seconds=_median_of(r.graph_recording_seconds for r in rows),
        tail_seconds=_median_of(r.tail_seconds for r in rows),
        tail_share=_median_of(r.tail_share for r in rows),
        drain_share=_median_of(r.drain_share for r in rows),
        projected_makespan_seconds=_median_of(r.projected_makespan_seconds for r in rows),
        startup_seconds=_median_of(r.startup_seconds for r in rows),
        drafts_by_batch=_summed(r.drafts_by_batch for r in rows),
    )


def _summed(counts: Iterable[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    total: dict[str, dict[str, int]] = {}
    for one in counts:
        for label, shapes in one.items():
            into = total.setdefault(label, {})
            for shape, n in shapes.items():
                into[shape] = into.get(shape, 0) + n
    return dict(sorted(total.items(), key=lambda item: int(item[0].split("-")[0])))


def _median_of(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
