"""One RL rollout: a task's prompts x n samples through the engine, scored by the task's reward."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from specroll.drafting.protocol import Drafter
from specroll.drafting.registry import DEFAULT_DRAFTER, DrafterContext, make_drafter
from specroll.engine.config import EngineConfig
from specroll.engine.engine import Engine, add_requests, torch_dtype
from specroll.engine.request import Request, SamplingParams
from specroll.model.catalog import resolve_model_dir
from specroll.model.loader import read_config
from specroll.model.runner import ModelRunner, batch_invariance_available
from specroll.policies.cost_model import Affine, CostModel
from specroll.policies.registry import DEFAULT_POLICY, make_policy
from specroll.tail import tail_seconds
from specroll.tasks import DEFAULT_TASK, JsonlTask, Problem, Task, get_reward, get_task
from specroll.tasks.rewards import DEFAULT_REWARD
from specroll.tokenizer import Tokenizer, load_tokenizer

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
DEFAULT_MODEL = CHECKPOINTS / "policy"
DEFAULT_DRAFT_MODEL = CHECKPOINTS / "draft"
PROFILES = CHECKPOINTS.parent / "profiles"


@dataclass(frozen=True)
class RolloutConfig:
    model_dir: Path = DEFAULT_MODEL
    task: str = DEFAULT_TASK
    num_prompts: int = 64
    n: int = 8  # samples per prompt: the group size
    max_tokens: int = 512
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    speculate: str = "on"  # off | on (the default drafter) | a drafter's name
    policy: str = DEFAULT_POLICY
    verify: str = "exact"
    max_batch_size: int = 256
    max_draft: int = 8
    draft_model_dir: Path = DEFAULT_DRAFT_MODEL
    step: int = 0  # the RL training step this rollout belongs to
    threads: int = 0  # CPU threads for torch; 0 = auto (see `cpu_threads`)
    cost_model: Path | None = None  # a `specroll profile` fit; None = profiles/<model>.cost.json if present
    batch_invariant: bool = True  # False: faster forwards whose logits vary with the batch by ~1e-5
    prompts: Path | None = None  # a JSONL file of prompts: the task, in place of `task` (see JsonlTask)
    prompt_field: str = "prompt"  # the fields of `prompts` records to read
    answer_field: str = "answer"
    reward_name: str = DEFAULT_REWARD  # how `prompts` responses are scored (specroll.tasks.rewards)
    workers: int = 1  # engines; more than one runs them on Ray, coordinated by `specroll.cluster`
    dispatch: str = "divided"  # with workers: static | divided | context-aware (`ClusterConfig`)
    chunk_tokens: int = 0  # divided dispatch's chunk; 0 = max_tokens / 4
    worker_backend: str = "ray"  # ray | inline (every worker in this process, in turn)
    fastest_of_n: bool = False  # with workers: idle workers run copies of the stragglers

    def __post_init__(self) -> None:
        if self.num_prompts <= 0 or self.n <= 0:
            raise ValueError(f"num_prompts and n must be positive, got {self.num_prompts}, {self.n}")
        SamplingParams(self.max_tokens, self.temperature, self.top_k, self.top_p)  # validates
        if self.prompts is not None and self.task != DEFAULT_TASK:
            raise ValueError(f"give a task ({self.task!r}) or a prompts file ({self.prompts}), not both")
        get_reward(self.reward_name)  # validates
        self.cluster  # validates
        if self.fastest_of_n and (self.verify != "exact" or not self.batch_invariant):
            raise ValueError("fastest_of_n runs copies that must make the same tokens: it needs verify 'exact' "
                             "and batch-invariant numerics")

    @property
    def drafter_name(self) -> str | None:
        """`on` means the draft model when a draft checkpoint for this target is at hand (it measured
        the highest acceptance on the bundled task), else the model-free suffix drafters."""
        if self.speculate == "on":
            return "draft-model" if self.has_matching_draft else DEFAULT_DRAFTER
        return None if self.speculate == "off" else self.speculate

    @property
    def cluster(self):
        from specroll.cluster.rollout import ClusterConfig

        return ClusterConfig(self.workers, self.dispatch, self.chunk_tokens, self.worker_backend, self.seed,
                             self.fastest_of_n)

    @property
    def has_matching_draft(self) -> bool:
        """A draft checkpoint exists and shares the target's vocabulary (the bundled draft is the
        bundled policy's: it cannot draft for another model, such as a pulled `smollm2`)."""
        if self.draft_model_dir is None or not (Path(self.draft_model_dir) / "config.json").is_file():
            return False
        return read_config(self.draft_model_dir).vocab_size == read_config(self.model_dir).vocab_size


@dataclass
class RolloutRecord:
    request_id: int
    prompt_id: int
    sample: int
    token_ids: list[int]
    logprobs: list[float]
    text: str
    reward: float | None
    finish_reason: str | None
    num_preemptions: int = 0
    error: str | None = None


@dataclass
class RolloutSummary:
    num_requests: int
    output_tokens: int
    makespan_seconds: float
    tokens_per_second: float
    mean_acceptance_length: float
    forward_passes: int
    tail_seconds: float  # time from 90% of requests finished to the last
    mean_reward: float


@dataclass
class RolloutResult:
    records: list[RolloutRecord]
    summary: RolloutSummary
    telemetry: list[dict] = field(default_factory=list)
    acceptance_by_drafter: dict[str, float] = field(default_factory=dict)  # `Telemetry.acceptance_by_source`
    cluster: dict | None = None  # a rollout over several workers: dispatch, re-prefills, lost workers

    def write_jsonl(self, path: str | Path) -> None:
        _write_jsonl(path, [asdict(r) for r in self.records])

    def write_telemetry(self, path: str | Path) -> None:
        """One object per verification forward: batch, per-request drafted/accepted, times."""
        _write_jsonl(path, self.telemetry)


def _write_jsonl(path: str | Path, rows: list[dict]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


ProgressFn = Callable[[Engine, int, int], None]  # engine, finished requests, output tokens so far


def cpu_threads(config: RolloutConfig) -> int:
    """Threads for torch on CPU. A small model's forwards are too short to split: one thread avoids
    synchronisation costs (and, on a shared machine, oversubscription, which we measured slowing a
    small matmul 60x); a large model uses every core."""
    if config.threads > 0:
        return config.threads
    model = read_config(config.model_dir)
    params = model.num_layers * (4 * model.hidden_size ** 2 + 3 * model.hidden_size * model.intermediate_size)
    return 1 if params < 50_000_000 else (os.cpu_count() or 1)


def apply_threads(config: RolloutConfig) -> None:
    """Set torch's threads (`cpu_threads`). Under batch-invariant numerics an automatic choice drops
    to one thread where the BLAS has no row-count-invariant regime at more (`batch_invariant`)."""
    import torch

    threads = cpu_threads(config)
    torch.set_num_threads(threads)
    if config.batch_invariant and config.threads == 0 and threads > 1 and not batch_invariance_available(config.model_dir):
        torch.set_num_threads(1)


def load_cost_model(config: RolloutConfig) -> CostModel | None:
    """The profiled cost model for this checkpoint, or None (policies then use their default)."""
    if config.cost_model is not None:
        return CostModel.load(config.cost_model)
    name = f"{Path(config.model_dir).resolve().name}.cost.json"
    for folder in (Path("profiles"), PROFILES):
        if (folder / name).is_file():
            return CostModel.load(folder / name)
    return None


def _runs_draft_model(config: RolloutConfig) -> bool:
    return config.drafter_name in ("draft-model", "ladder")


def build_engine(config: RolloutConfig, longest_prompt: int, drafter: Drafter | None = None) -> Engine:
    """An engine whose cache fits the longest prompt plus max_tokens (within the model's positions)."""
    max_positions = read_config(config.model_dir).max_position_embeddings
    engine_config = EngineConfig(max_batch_size=config.max_batch_size, max_draft=config.max_draft,
                                 max_model_len=min(max_positions, longest_prompt + config.max_tokens),
                                 verify=config.verify, seed=config.seed, batch_invariant=config.batch_invariant)
    runner = ModelRunner.from_pretrained(config.model_dir, engine_config.max_batch_size,
                                         engine_config.cache_capacity, torch_dtype(engine_config.dtype),
                                         batch_invariant=engine_config.batch_invariant)
    if drafter is None and config.drafter_name is not None:
        context = DrafterContext(runner.config.vocab_size, config.draft_model_dir, seed=config.seed,
                                 max_batch_size=config.max_batch_size, max_model_len=engine_config.max_model_len,
                                 max_draft=config.max_draft, verify=config.verify)
        drafter = make_drafter(config.drafter_name, context)
    cost_model = load_cost_model(config)
    if cost_model is not None and not _runs_draft_model(config):
        cost_model = cost_model.with_draft(Affine(0.0, 0.0))  # model-free drafting costs ~nothing
    policy = make_policy(config.policy if drafter is not None else "none", cost_model)
    return Engine(runner, engine_config, drafter, policy, training_step=config.step)


def make_task(config: RolloutConfig) -> Task:
    """The prompts file's task when there is one, else the registered task `config.task`."""
    if config.prompts is not None:
        return JsonlTask(Path(config.prompts), config.prompt_field, config.answer_field, config.reward_name)
    return get_task(config.task)


def load_problems(config: RolloutConfig) -> tuple[Task, dict[int, Problem]]:
    """The task and its problems for this rollout, by prompt_id (which must be unique)."""
    task = make_task(config)
    problems = task.problems(config.num_prompts, config.seed)
    by_id = {p.prompt_id: p for p in problems}
    if len(by_id) != len(problems):
        raise ValueError(f"task {task.name!r} returned problems with repeated prompt_ids")
    if not by_id:
        raise ValueError(f"task {task.name!r} returned no problems")
    return task, by_id


def encode_prompts(tokenizer: Tokenizer, task: Task, problems: dict[int, Problem]) -> dict[int, tuple[int, ...]]:
    """Each problem's prompt ids, in the checkpoint's chat template where it has one and the task uses it."""
    return {prompt_id: tuple(tokenizer.encode_prompt(p.prompt, task.use_chat_template))
            for prompt_id, p in problems.items()}


def run_rollout(config: RolloutConfig, progress: ProgressFn | None = None,
                drafter: Drafter | None = None,
                worker_progress: Callable[[int, int], None] | None = None) -> RolloutResult:
    """Run the rollout; `drafter` overrides the one `config.speculate` names (e.g. an oracle).
    With several workers, `worker_progress(finished requests, output tokens)` replaces `progress`."""
    config = replace(config, model_dir=resolve_model_dir(config.model_dir))  # a name such as "smollm2"
    task, problems = load_problems(config)
    tokenizer = load_tokenizer(config.model_dir)
    prompts = encode_prompts(tokenizer, task, problems)
    requests = make_requests(config, tokenizer, problems.values(), prompts)
    if config.workers > 1:
        if drafter is not None:
            raise ValueError("a drafter object cannot be shipped to workers: name one with `speculate`")
        return run_on_workers(config, requests, tokenizer, task, problems, progress=worker_progress)
    apply_threads(config)
    engine = build_engine(config, max(map(len, prompts.values())), drafter)
    return run_requests(engine, requests, tokenizer, task, problems, progress)


def run_on_workers(config: RolloutConfig, requests: list[Request], tokenizer: Tokenizer, task: Task,
                   problems: dict[int, Problem], on_report=None,
                   progress: Callable[[int, int], None] | None = None) -> RolloutResult:
    """The rollout over `config.workers` engines (`specroll.cluster`); the same records."""
    from specroll.cluster.rollout import run_cluster

    longest = max(len(r.prompt_token_ids) for r in requests)
    outcome = run_cluster(config.cluster, config, requests, longest, on_report, progress)
    records = [make_record(s.request, tokenizer, task, problems[s.request.group_id], s.error) for s in outcome.states]
    rows = [row for t in outcome.telemetry for row in t.rows]
    decode_rows = sum(t.decode_rows for t in outcome.telemetry)
    summary = _summary(requests, records, [*(s.finish_seconds for s in outcome.states), outcome.makespan_seconds],
                       sum(t.decode_emitted for t in outcome.telemetry) / decode_rows if decode_rows else 0.0,
                       sum(t.num_forwards for t in outcome.telemetry))
    cluster = {"workers": config.workers, "dispatch": config.dispatch, "reports": outcome.num_reports,
               "lost_workers": outcome.num_lost_workers, "reprefills": outcome.num_reprefills,
               "reprefill_tokens": float(outcome.reprefill_tokens), "worker_busy_seconds": outcome.worker_busy_seconds,
               "copies": outcome.num_copies, "dropped_tokens": outcome.dropped_tokens}
    return RolloutResult(records, summary, rows, cluster=cluster)


def make_requests(config: RolloutConfig, tokenizer: Tokenizer, problems: Iterable[Problem],
                  prompts: dict[int, tuple[int, ...]], first_id: int = 0) -> list[Request]:
    """`config.n` requests per problem, ids from `first_id` (prompt_id * n + sample after it)."""
    params = SamplingParams(config.max_tokens, config.temperature, config.top_k, config.top_p,
                            stop_token_ids=tokenizer.stop_token_ids)
    return [Request(first_id + p.prompt_id * config.n + s, p.prompt_id, s, prompts[p.prompt_id], params)
            for p in problems for s in range(config.n)]


def run_requests(engine: Engine, requests: list[Request], tokenizer: Tokenizer, task: Task,
                 problems: dict[int, Problem], progress: ProgressFn | None = None) -> RolloutResult:
    """Run `requests` to completion on `engine` (which may have run others before: its telemetry is
    started afresh) and score them; a refused request gets a record with its error."""
    engine.telemetry.clear()
    errors = add_requests(engine, requests)
    finish_times = _run(engine, requests, progress)
    records = [make_record(r, tokenizer, task, problems[r.group_id], errors.get(r.request_id)) for r in requests]
    summary = _summary(requests, records, finish_times, engine.telemetry.mean_acceptance_length,
                       engine.telemetry.num_forwards)
    return RolloutResult(records, summary, engine.telemetry.as_rows(), engine.telemetry.acceptance_by_source())


def _run(engine: Engine, requests: list[Request], progress: ProgressFn | None) -> list[float]:
    start = time.perf_counter()
    finish_times: list[float] = []

    def on_iteration(finished: list[Request]) -> None:
        finish_times.extend([time.perf_counter() - start] * len(finished))
        if progress is not None:
            progress(engine, len(finish_times), engine.telemetry.output_tokens)

    engine.run(on_iteration)
    finish_times.append(time.perf_counter() - start)  # the makespan closes the list
    return finish_times


def make_record(request: Request, tokenizer: Tokenizer, task: Task, problem: Problem, error: str | None) -> RolloutRecord:
    """A finished request as a record: its decoded text scored by the task (None for a refused request)."""
    text = tokenizer.decode(request.output_token_ids)
    reward = None if error else task.reward(problem, text)
    return RolloutRecord(request.request_id, request.group_id, request.sample_index, request.output_token_ids,
                         request.output_logprobs, text, reward, request.finish_reason,
                         request.num_preemptions, error)


def _summary(requests: list[Request], records: list[RolloutRecord], finish_times: list[float],
             mean_acceptance_length: float, forward_passes: int) -> RolloutSummary:
    """`finish_times`: each request's, then the makespan."""
    makespan = finish_times[-1]
    output_tokens = sum(r.num_output_tokens for r in requests)
    rewards = [r.reward for r in records if r.reward is not None]
    return RolloutSummary(
        num_requests=len(requests),
        output_tokens=output_tokens,
        makespan_seconds=makespan,
        tokens_per_second=output_tokens / makespan if makespan > 0 else 0.0,
        mean_acceptance_length=mean_acceptance_length,
        forward_passes=forward_passes,
        tail_seconds=tail_seconds(finish_times[:-1]),
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
    )
