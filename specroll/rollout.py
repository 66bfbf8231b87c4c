"""One RL rollout: a task's prompts x n samples through the engine, scored by the task's reward."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable

from specroll.cluster.multi_worker import ClusterConfig, run_cluster
from specroll.drafting.protocol import Drafter
from specroll.engine.choices import CHECKPOINTS, DEFAULT_DRAFT_MODEL, EngineChoices
from specroll.engine.engine import Engine, add_requests
from specroll.engine.factory import build_engine
from specroll.engine.threads import ThreadChoice, apply_threads
from specroll.engine.request import Request, RequestOutput, SamplingParams
from specroll.engine.spec import EngineSpec
from specroll.engine_config import EngineConfig
from specroll.model.blas_mode import describe as describe_cpu_numerics
from specroll.model.catalog import resolve_model_dir
from specroll.model.config import ModelConfig
from specroll.model.loader import read_config
from specroll.policies.cost_model import CostModel
from specroll.policies.policy_names import DEFAULT_POLICY
from specroll.tail import tail_seconds
from specroll.tasks import DEFAULT_TASK, JsonlTask, Problem, Task, get_reward, get_task
from specroll.tasks.rewards import DEFAULT_REWARD
from specroll.tokenizer import Tokenizer, load_tokenizer

DEFAULT_MODEL = CHECKPOINTS / "policy"


@dataclass(frozen=True)
class RolloutConfig:
    """A rollout: the workload, its sampling, how it speculates, the engine's settings (`engine`, the
    one value every engine of the rollout is built with; its max_model_len is set from the prompts and
    max_tokens when the engine is built) and its engines (`cluster`)."""

    model_dir: Path = field(default=DEFAULT_MODEL, metadata={"flag": "model"})
    task: str = DEFAULT_TASK
    num_prompts: int = 64
    n: int = 8  # samples per prompt: the group size
    max_tokens: int = 512
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    engine: EngineConfig = field(default_factory=EngineConfig)  # batch, draft limit, verify, seed, numerics
    speculate: str = "on"  # off | on (the default drafter) | a drafter's name
    policy: str = DEFAULT_POLICY
    draft_model_dir: Path = field(default=DEFAULT_DRAFT_MODEL, metadata={"flag": "draft_model"})
    # None: <model_dir>/draft-head, where `specroll head train` saves
    draft_head_dir: Path | None = field(default=None, metadata={"flag": "draft_head"})
    step: int = 0  # the RL training step this rollout belongs to
    threads: int = 0  # CPU threads for torch; 0 = auto (`specroll.engine.threads`)
    cost_model: Path | None = None  # a profile fit; None = one of the engine's device (cost_model_path)
    prompts: Path | None = None  # a JSONL file of prompts: the task, in place of `task` (see JsonlTask)
    prompt_field: str = "prompt"  # the fields of `prompts` records to read
    answer_field: str = "answer"
    # how `prompts` responses are scored (specroll.tasks.rewards)
    reward_name: str = field(default=DEFAULT_REWARD, metadata={"flag": "reward"})
    cluster: ClusterConfig = field(default_factory=ClusterConfig)  # workers, dispatch (`specroll.cluster`)

    def __post_init__(self) -> None:
        if self.num_prompts <= 0 or self.n <= 0:
            raise ValueError(f"num_prompts and n must be positive, got {self.num_prompts}, {self.n}")
        SamplingParams(self.max_tokens, self.temperature, self.top_k, self.top_p)  # validates
        if self.prompts is not None and self.task != DEFAULT_TASK:
            raise ValueError(f"give a task ({self.task!r}) or a prompts file ({self.prompts}), not both")
        get_reward(self.reward_name)  # validates
        if self.cluster.fastest_of_n and not self.engine.is_lossless:
            raise ValueError(
                "fastest_of_n runs copies that must make the same tokens: it needs verify 'exact' "
                "and batch-invariant numerics"
            )

    @property
    def choices(self) -> EngineChoices:
        """What this rollout chose for its engine, resolved into a spec by `EngineChoices`."""
        return EngineChoices(
            Path(self.model_dir),
            self.engine,
            self.speculate,
            self.policy,
            self.draft_model_dir,
            self.draft_head_dir,
            self.cost_model,
            self.step,
            self.threads,
        )

    @cached_property
    def target_config(self) -> ModelConfig:
        """The target's config.json, read once for this rollout: its spec, the engine built from that
        and what the rollout reports of its drafter all take this one value. (A config changed with
        `replace` is a new value, and reads its own.)"""
        return read_config(self.model_dir)

    @property
    def drafter_name(self) -> str | None:
        """The drafter `speculate` names for this target (`EngineChoices.drafter_name`): its spec's."""
        return self.engine_spec().drafter

    @property
    def has_matching_draft(self) -> bool:
        return self.choices.has_matching_draft(self.target_config)

    @property
    def head_dir(self) -> Path:
        return self.choices.head_dir

    @property
    def has_head(self) -> bool:
        return self.choices.has_head(self.target_config)

    def engine_spec(self) -> EngineSpec:
        """What building this rollout's engine needs, here or in a worker (`specroll.engine.factory`),
        with the target's config read once and handed down (`EngineSpec.model`)."""
        return self._engine_spec

    @cached_property
    def _engine_spec(self) -> EngineSpec:
        choices = self.choices
        choices.cost_model_path()  # a profile of another device is refused first, by name, as `spec` does
        return choices.spec(self.max_tokens, self.target_config)

    def with_engine(self, **changes) -> RolloutConfig:
        """This rollout with some of the engine's settings changed (`dataclasses.replace` on `engine`)."""
        return replace(self, engine=replace(self.engine, **changes))

    def with_cluster(self, **changes) -> RolloutConfig:
        """This rollout with some of its workers' settings changed (`dataclasses.replace` on `cluster`)."""
        return replace(self, cluster=replace(self.cluster, **changes))

    @classmethod
    def from_flat(cls, values: dict) -> RolloutConfig:
        """A config from one flat mapping of field names, those of the configs it holds beside its own,
        as the command line's flags and a training run's saved config name them (`as_flat`'s inverse)."""
        held = {
            name: kind(**{key: value for key, value in values.items() if key in _names(kind)})
            for name, kind in _HELD.items()
        }
        own = {key: value for key, value in values.items() if key not in _HELD_NAMES}
        return cls(**own, **held)

    @classmethod
    def flat_names(cls) -> frozenset[str]:
        """The keys of `as_flat`."""
        return frozenset(f.name for f in fields(cls) if f.name not in _HELD) | _HELD_NAMES

    def as_flat(self) -> dict:
        """The fields as one flat mapping, those of the configs it holds beside its own (no name is
        two fields': `tests/train/test_run_config.py`)."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _HELD}
        return own | asdict(self.engine) | asdict(self.cluster)


_HELD = {"engine": EngineConfig, "cluster": ClusterConfig}  # RolloutConfig's fields that are configs


def _names(kind: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(kind))


_HELD_NAMES = frozenset().union(*map(_names, _HELD.values()))


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
    graphs_recorded: int = 0  # CUDA graphs recorded during the rollout (`--cuda-graphs`)
    graph_recording_seconds: float = 0.0  # the time that took, inside the makespan


@dataclass
class RolloutResult:
    records: list[RolloutRecord]
    summary: RolloutSummary
    telemetry: list[dict] = field(default_factory=list)
    accepted_per_draft: dict[str, float] = field(default_factory=dict)  # by drafter (`Telemetry`)
    cluster: dict | None = None  # a rollout over several workers: dispatch, re-prefills, lost workers
    cpu: str | None = None  # a CPU run's threads and numerics, and why (`cpu_description`)

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


def cost_model_path(config: RolloutConfig) -> Path | None:
    """The profiled cost model for the rollout's checkpoint and device (`EngineChoices.cost_model_path`)."""
    return config.choices.cost_model_path()


def load_cost_model(config: RolloutConfig) -> CostModel | None:
    """The profile `cost_model_path` finds for the rollout's device, as measured (the engine's policy
    prices model-free drafts at nothing: `factory.policy_cost_model`); None without one."""
    path = cost_model_path(config)
    return CostModel.load(path) if path is not None else None


def make_task(config: RolloutConfig) -> Task:
    """The prompts file's task when there is one, else the registered task `config.task`."""
    if config.prompts is not None:
        return JsonlTask(Path(config.prompts), config.prompt_field, config.answer_field, config.reward_name)
    return get_task(config.task)


def load_problems(config: RolloutConfig) -> tuple[Task, dict[int, Problem]]:
    """The task and its problems for this rollout, by prompt_id (which must be unique)."""
    task = make_task(config)
    problems = task.problems(config.num_prompts, config.engine.seed)
    by_id = {p.prompt_id: p for p in problems}
    if len(by_id) != len(problems):
        raise ValueError(f"task {task.name!r} returned problems with repeated prompt_ids")
    if not by_id:
        raise ValueError(f"task {task.name!r} returned no problems")
    return task, by_id


def encode_prompts(
    tokenizer: Tokenizer, task: Task, problems: dict[int, Problem]
) -> dict[int, tuple[int, ...]]:
    """Each problem's prompt ids, in the checkpoint's chat template where it has one and the task uses it."""
    return {
        prompt_id: tuple(tokenizer.encode_prompt(p.prompt, task.use_chat_template))
        for prompt_id, p in problems.items()
    }


def run_rollout(
    config: RolloutConfig,
    progress: ProgressFn | None = None,
    drafter: Drafter | None = None,
    worker_progress: Callable[[int, int], None] | None = None,
) -> RolloutResult:
    """Run the rollout; `drafter` overrides the one `config.speculate` names (e.g. an oracle).
    With several workers, `worker_progress(finished requests, output tokens)` replaces `progress`."""
    model_dir = resolve_model_dir(config.model_dir)  # a name such as "smollm2"
    if model_dir != config.model_dir:  # the same directory keeps the config its target was read into
        config = replace(config, model_dir=model_dir)
    task, problems = load_problems(config)
    tokenizer = load_tokenizer(config.model_dir)
    prompts = encode_prompts(tokenizer, task, problems)
    requests = make_requests(config, tokenizer, problems.values(), prompts)
    if config.cluster.num_workers > 1:
        if drafter is not None:
            raise ValueError("a drafter object cannot be shipped to workers: name one with `speculate`")
        return run_on_workers(config, requests, tokenizer, task, problems, progress=worker_progress)
    spec = config.engine_spec()
    threads = apply_threads(spec)
    engine = build_engine(spec, max(map(len, prompts.values())), drafter)
    result = run_requests(engine, requests, tokenizer, task, problems, progress)
    if spec.engine.device == "cpu":
        result.cpu = cpu_description(threads, engine.describe_numerics())
    return result


def cpu_description(threads: ThreadChoice, numerics: str = "") -> str:
    """Which threads ran and why, the forwards' precision and kernels (`ModelRunner.describe_numerics`)
    and the settings that fix a CPU row's bits (`model.blas_mode`)."""
    kernels = f"{numerics}; " if numerics else ""
    return f"{threads.describe()}; {kernels}{describe_cpu_numerics().describe()}"


def run_on_workers(
    config: RolloutConfig,
    requests: list[Request],
    tokenizer: Tokenizer,
    task: Task,
    problems: dict[int, Problem],
    on_report=None,
    progress: Callable[[int, int], None] | None = None,
) -> RolloutResult:
    """The rollout over `config.cluster.num_workers` engines (`specroll.cluster`); the same records."""
    longest = max(len(r.prompt_token_ids) for r in requests)
    outcome = run_cluster(config.cluster, config.engine_spec(), requests, longest, on_report, progress)
    records = [make_record(o, tokenizer, task, problems[o.group_id]) for o in outcome.outputs]
    rows = [row for t in outcome.telemetry for row in t.rows]
    decode_rows = sum(t.decode_rows for t in outcome.telemetry)
    finish_times = [*(s.finish_seconds for s in outcome.states), outcome.makespan_seconds]
    summary = _summary(
        outcome.outputs,
        records,
        finish_times,
        sum(t.decode_emitted for t in outcome.telemetry) / decode_rows if decode_rows else 0.0,
        sum(t.num_forwards for t in outcome.telemetry),
    )
    cluster = {
        "workers": config.cluster.num_workers,
        "dispatch": config.cluster.dispatch,
        "reports": outcome.num_reports,
        "lost_workers": outcome.num_lost_workers,
        "reprefills": outcome.num_reprefills,
        "reprefill_tokens": float(outcome.reprefill_tokens),
        "worker_busy_seconds": outcome.worker_busy_seconds,
        "copies": outcome.num_copies,
        "dropped_tokens": outcome.dropped_tokens,
    }
    return RolloutResult(records, summary, rows, cluster=cluster)


def make_requests(
    config: RolloutConfig,
    tokenizer: Tokenizer,
    problems: Iterable[Problem],
    prompts: dict[int, tuple[int, ...]],
    first_id: int = 0,
) -> list[Request]:
    """`config.n` requests per problem, ids from `first_id` (prompt_id * n + sample after it)."""
    params = SamplingParams(
        config.max_tokens,
        config.temperature,
        config.top_k,
        config.top_p,
        stop_token_ids=tokenizer.stop_token_ids,
    )
    return [
        Request(first_id + p.prompt_id * config.n + s, p.prompt_id, s, prompts[p.prompt_id], params)
        for p in problems
        for s in range(config.n)
    ]


def run_requests(
    engine: Engine,
    requests: list[Request],
    tokenizer: Tokenizer,
    task: Task,
    problems: dict[int, Problem],
    progress: ProgressFn | None = None,
) -> RolloutResult:
    """Run `requests` to completion on `engine` (which may have run others before: its telemetry is
    started afresh) and score them; a refused request gets a record with its error."""
    engine.telemetry.clear()
    add_requests(engine, requests)  # a refused request ends with its error (`Request.fail`)
    graphs_before = engine.recorded_graphs()
    finish_times = _run(engine, requests, progress)
    outputs = [r.output() for r in requests]
    records = [make_record(o, tokenizer, task, problems[o.group_id]) for o in outputs]
    summary = _summary(
        outputs, records, finish_times, engine.telemetry.mean_acceptance_length, engine.telemetry.num_forwards
    )
    graphs, seconds = engine.recorded_graphs()
    summary.graphs_recorded = graphs - graphs_before[0]
    summary.graph_recording_seconds = seconds - graphs_before[1]
    return RolloutResult(
        records, summary, engine.telemetry.as_rows(), engine.telemetry.accepted_per_draft_by_source()
    )


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


def make_record(output: RequestOutput, tokenizer: Tokenizer, task: Task, problem: Problem) -> RolloutRecord:
    """A finished request as a record: its decoded text scored by the task (None for a refused request)."""
    text = tokenizer.decode(output.token_ids)
    reward = None if output.error else task.reward(problem, text)
    return RolloutRecord(
        output.request_id,
        output.group_id,
        output.sample_index,
        output.token_ids,
        output.logprobs,
        text,
        reward,
        output.finish_reason,
        output.num_preemptions,
        output.error,
    )


def _summary(
    requests: list[RequestOutput],
    records: list[RolloutRecord],
    finish_times: list[float],
    mean_acceptance_length: float,
    forward_passes: int,
) -> RolloutSummary:
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
