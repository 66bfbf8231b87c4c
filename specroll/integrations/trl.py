"""specroll rollouts for TRL's GRPOTrainer: `GRPOTrainer(..., rollout_func=make_rollout_func())`.

The contract, as TRL 1.16 implements it (`trl/trainer/grpo_trainer.py`, `GRPOTrainer._generate`):
- TRL calls `rollout_func(prompts, trainer)` once per generation batch (every
  `steps_per_generation x num_iterations` micro-steps), in each process, with that process's slice;
- `prompts` are the data set's `prompt` values as they stand: a text, or a conversation (a list of
  messages) that the rollout function renders in the chat template itself;
- its sampler (`RepeatSampler`) repeats each prompt `num_generations` times in a row, and TRL wants
  exactly one completion per entry, in order: a run of identical prompts is one group;
- it wants a dict of per-entry lists `prompt_ids`, `completion_ids` and `logprobs`; any other key
  would reach the reward functions. TRL compares `logprobs` with its own per-token log-probabilities,
  log_softmax(logits / temperature) over the whole vocabulary (its importance-sampling correction
  and off-policy mask), so the engine reports exactly that (`specroll.sampling.policy_logprobs`), not
  the top-k/top-p-truncated distribution it draws from, whose renormalisation would put log(kept
  mass) into every ratio;
- without vLLM nothing copies the trainer's weights anywhere: this adapter copies `trainer.model`'s
  weights into its engine, in place, whenever `trainer.state.global_step` has moved.

One engine is kept for the whole run (one per process), so drafters carry over: history drafting
reads a prompt's responses from earlier steps (`Engine.advance_step`; a prompt keeps its group id
from step to step) and grouped drafting reads its siblings. Request ids never repeat, across calls
or processes: exact-mode sampling noise is keyed by (seed, request id, position), so a repeated id
would draw the same noise again. TRL itself is never imported here; `trainer` is read by attribute.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

import torch

from specroll.engine.engine import Engine, add_requests
from specroll.engine.factory import build_engine
from specroll.engine.threads import apply_threads
from specroll.engine.request import Request, SamplingParams
from specroll.engine.spec import EngineSpec
from specroll.engine_config import EngineConfig
from specroll.model.catalog import resolve_model_dir
from specroll.model.device import check_graph_choice, resolve_cuda_graphs
from specroll.placement import is_batch_invariant
from specroll.policies.policy_names import DEFAULT_POLICY
from specroll.rollout import RolloutConfig
from specroll.tokenizer import Tokenizer


class GRPOTrainerLike(Protocol):
    """What is read of TRL's `GRPOTrainer` (its attributes in TRL 1.16)."""

    processing_class: Any  # a tokenizer, or a processor holding one as `.tokenizer`
    chat_template: str | None  # overrides the tokenizer's (TRL sets one for multi-turn tool use)
    chat_template_kwargs: dict
    tools: list | None
    max_completion_length: int | None
    temperature: float
    top_k: int | None
    top_p: float | None
    min_p: float | None
    repetition_penalty: float | None
    args: Any  # its GRPOConfig: `seed`, `generation_kwargs`
    state: Any  # `global_step`
    model: torch.nn.Module
    accelerator: Any  # `unwrap_model`, `num_processes`, `process_index`


@dataclass(frozen=True)
class TrlRolloutConfig:
    """The checkpoint, its speculation and the engine's settings (`engine`, as every rollout holds them),
    but for three the trainer settles: the device is the trainer model's (and off the CPU the numerics
    are the fast ones: batch invariance is proven for the CPU only), the seed is `seed` and CUDA graphs
    are `cuda_graphs`, a choice made on that device. Those three are left at their defaults in `engine`:
    another value there is refused, not replaced."""

    model_dir: Path | None = None  # the checkpoint the engine loads; None = the trainer model's name_or_path
    speculate: str = "on"  # off | on (the default drafter) | a drafter's name
    policy: str = DEFAULT_POLICY
    engine: EngineConfig = field(default_factory=EngineConfig)  # batch, draft limit, verify, numerics
    seed: int | None = None  # None = the trainer's `args.seed`
    threads: int = 0  # torch threads while rolling out (restored afterwards); 0 = auto
    max_prompt_length: int | None = None  # the engine's room for prompts; None = the first batch's longest
    cuda_graphs: str = "auto"  # auto | on | off: decode and verification as CUDA graphs (auto: on CUDA)

    def __post_init__(self) -> None:
        check_graph_choice(self.cuda_graphs)
        settled = [
            name for name in ("device", "seed", "cuda_graphs") if _differs_from_default(self.engine, name)
        ]
        if settled:
            raise ValueError(
                f"the engine's {', '.join(settled)} follow the trainer: leave them out of `engine` (the "
                "device is the trainer model's; pass seed= and cuda_graphs= instead)"
            )
        if self.max_prompt_length is not None and self.max_prompt_length <= 0:
            raise ValueError(f"max_prompt_length must be positive, got {self.max_prompt_length}")


def _differs_from_default(engine: EngineConfig, name: str) -> bool:
    return getattr(engine, name) != getattr(EngineConfig(), name)


def make_rollout_func(model_dir: str | Path | None = None, **options: Any) -> "SpecrollRollout":
    """The function to pass as `GRPOTrainer(..., rollout_func=...)`. `options` are `TrlRolloutConfig`'s
    fields and the engine's (`EngineConfig`'s, e.g. max_batch_size=16, batch_invariant=False)."""
    own = {f.name for f in fields(TrlRolloutConfig)}
    engine = replace(
        options.get("engine", EngineConfig()), **{k: v for k, v in options.items() if k not in own}
    )
    given = {name: value for name, value in options.items() if name in own} | {"engine": engine}
    return SpecrollRollout(TrlRolloutConfig(Path(model_dir) if model_dir is not None else None, **given))


class SpecrollRollout:
    """`fn(prompts, trainer) -> dict` for TRL, running every call on one engine built at the first."""

    def __init__(self, config: TrlRolloutConfig) -> None:
        self.config = config
        self.engine: Engine | None = None
        self.spec: EngineSpec | None = None  # fixed at the first call, from the trainer's settings
        self.weights_step: int | None = None  # the trainer step whose weights the engine holds
        self.num_requests = 0  # made by this process so far
        self._group_ids: dict[tuple[int, ...], int] = {}  # a prompt's ids -> its group, for every step

    def __call__(self, prompts: list, trainer: GRPOTrainerLike) -> dict[str, list]:
        prompt_ids = encode_prompts(prompts, trainer)
        params = sampling_params(trainer)
        if self.spec is None:
            self.spec = rollout_config(self.config, trainer, params).engine_spec()
        with torch_threads(self.spec):
            engine = self._engine(max(map(len, prompt_ids)))
            self._follow(trainer, engine)
            requests = self._requests(prompt_ids, params, engine, trainer.accelerator)
            run(engine, requests)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": [list(r.output_token_ids) for r in requests],
            "logprobs": [list(r.output_logprobs) for r in requests],
        }

    def _engine(self, longest_prompt: int) -> Engine:
        if self.engine is None:
            self.engine = build_engine(self.spec, self.config.max_prompt_length or longest_prompt)
        return self.engine

    def _follow(self, trainer: GRPOTrainerLike, engine: Engine) -> None:
        """A new trainer step: its weights into the engine, and the drafters into the step."""
        step = trainer.state.global_step
        if step != self.weights_step:
            engine.load_weights(trainer.accelerator.unwrap_model(trainer.model).state_dict())
            engine.advance_step(step)
            self.weights_step = step

    def _requests(
        self, prompt_ids: list[list[int]], params: SamplingParams, engine: Engine, accelerator: Any
    ) -> list[Request]:
        check_room(prompt_ids, params, engine)
        rank, num_processes = accelerator.process_index, accelerator.num_processes
        ids = [
            (self.num_requests + i) * num_processes + rank for i in range(len(prompt_ids))
        ]  # unique everywhere
        self.num_requests += len(prompt_ids)
        return [
            Request(request_id, self._group_id(prompt), sample, tuple(prompt), params)
            for request_id, prompt, sample in zip(ids, prompt_ids, sample_indices(prompt_ids))
        ]

    def _group_id(self, prompt_ids: Sequence[int]) -> int:
        return self._group_ids.setdefault(tuple(prompt_ids), len(self._group_ids))


def sample_indices(prompt_ids: Sequence[Sequence[int]]) -> list[int]:
    """Each entry's place in its run of identical consecutive prompts: [a, a, b, b, b] -> [0, 1, 0, 1, 2]."""
    indices: list[int] = []
    for i, ids in enumerate(prompt_ids):
        indices.append(indices[-1] + 1 if i and prompt_ids[i - 1] == ids else 0)
    return indices


def run(engine: Engine, requests: list[Request]) -> None:
    """Run `requests` to completion; the engine's telemetry then holds this call's forwards only."""
    engine.telemetry.clear()
    errors = add_requests(engine, requests)
    engine.run()
    if errors:
        raise ValueError(f"{len(errors)} prompts were refused, e.g.: {next(iter(errors.values()))}")


def check_room(prompt_ids: list[list[int]], params: SamplingParams, engine: Engine) -> None:
    """Refuse a batch before queueing any of it if a prompt leaves too little room for a completion
    (the scheduler's own rule, `Engine.context_room`, applied to the whole batch first)."""
    room = engine.context_room
    longest = max(map(len, prompt_ids))
    if longest + params.max_tokens > room:
        raise ValueError(
            f"a prompt of {longest} tokens plus max_completion_length ({params.max_tokens}) exceeds "
            f"the engine's {room} positions: pass a larger max_prompt_length "
            f"to make_rollout_func (at most the model's positions minus max_completion_length)"
        )


# ----- reading the trainer


def encode_prompts(prompts: list, trainer: GRPOTrainerLike) -> list[list[int]]:
    """Each prompt's ids as TRL's own generation makes them (`GRPOTrainer._tokenize_prompts`): a
    conversation in the chat template with the assistant's turn opened, a text as it stands."""
    processing = trainer.processing_class
    if not is_conversation(prompts[0]):
        return [list(ids) for ids in processing(text=prompts)["input_ids"]]
    if trainer.chat_template is None and not Tokenizer(text_tokenizer(trainer)).has_chat_template:
        raise ValueError("the prompts are conversations but the tokenizer has no chat template")
    rendered = processing.apply_chat_template(
        conversation=prompts,
        tools=trainer.tools or None,
        chat_template=trainer.chat_template,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        **(trainer.chat_template_kwargs or {}),
    )
    return [list(ids) for ids in rendered["input_ids"]]


def is_conversation(prompt: Any) -> bool:
    """A conversational prompt is a list of messages, each a dict with a role (TRL's `is_conversational`)."""
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict) and "role" in prompt[0]


def text_tokenizer(trainer: GRPOTrainerLike) -> Any:
    """The trainer's tokenizer (a multimodal processor carries one as `.tokenizer`)."""
    return getattr(trainer.processing_class, "tokenizer", trainer.processing_class)


def sampling_params(trainer: GRPOTrainerLike) -> SamplingParams:
    """The trainer's generation settings (`GRPOConfig`) as the engine's; refuses those it lacks,
    since sampling otherwise than the trainer asks would be silently off-policy."""
    unsupported = unsupported_settings(trainer)
    if unsupported:
        raise ValueError(
            f"specroll's engine does not implement {', '.join(unsupported)}: unset them in GRPOConfig"
        )
    if trainer.max_completion_length is None:
        raise ValueError("set GRPOConfig.max_completion_length: the engine sizes its cache by it")
    return SamplingParams(
        trainer.max_completion_length,
        trainer.temperature,
        trainer.top_k or 0,
        trainer.top_p or 1.0,
        stop_token_ids=Tokenizer(text_tokenizer(trainer)).stop_token_ids,
    )


def unsupported_settings(trainer: GRPOTrainerLike) -> list[str]:
    found = []
    if trainer.min_p:
        found.append(f"min_p={trainer.min_p}")
    if trainer.repetition_penalty not in (None, 1.0):
        found.append(f"repetition_penalty={trainer.repetition_penalty}")
    if trainer.args.generation_kwargs:
        found.append(f"generation_kwargs={trainer.args.generation_kwargs}")
    return found


def rollout_config(
    config: TrlRolloutConfig, trainer: GRPOTrainerLike, params: SamplingParams
) -> RolloutConfig:
    """The engine's settings: the checkpoint and speculation from `config`, sampling from the trainer."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    model_dir = config.model_dir or model.name_or_path
    seed = config.seed if config.seed is not None else trainer.args.seed
    device = next(model.parameters()).device.type  # the engine runs beside the trainer's model
    return RolloutConfig(
        model_dir=resolve_model_dir(model_dir),
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
        engine=replace(
            config.engine,
            seed=seed,
            device=device,
            batch_invariant=is_batch_invariant(device, fast_numerics=not config.engine.batch_invariant),
            cuda_graphs=resolve_cuda_graphs(config.cuda_graphs, device),
        ),
        speculate=config.speculate,
        policy=config.policy,
        step=trainer.state.global_step,
        threads=config.threads,
    )


@contextmanager
def torch_threads(spec: EngineSpec) -> Iterator[None]:
    """The rollout's torch threads (`apply_threads`) for the block, the trainer's again after it."""
    previous = torch.get_num_threads()
    apply_threads(spec)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
