"""Building the rollout engine from an `EngineSpec`: the checkpoint, the drafter and policy it names,
the profiled cost model (or, off the CPU without one, prices measured on the device), and torch's
threads. The one way every caller builds an engine: a one-process rollout, each worker of a
multi-worker one, the trainer and the TRL adapter. Threads: `engine.threads`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path


from specroll.drafting.protocol import Drafter
from specroll.drafting.registry import DrafterContext, make_drafter
from specroll.engine.device_prices import measure_device_prices, needs_device_profile
from specroll.engine.engine import Engine
from specroll.engine.memory import batch_that_fits
from specroll.model.device import torch_dtype
from specroll.engine.spec import EngineSpec
from specroll.engine_config import EngineConfig
from specroll.model.config import ModelConfig
from specroll.model.runner import ModelRunner
from specroll.policies.cost_model import Affine, CostModel, check_profile_device
from specroll.policies.policy_names import make_policy


def policy_cost_model(spec: EngineSpec) -> CostModel | None:
    """The cost model the policy reads: the spec's profile (refused if measured on another device
    type), or None. Model-free drafting is priced at nothing: the profile's draft costs are a draft
    model's."""
    if spec.cost_model is None:
        return None
    cost_model = CostModel.load(spec.cost_model)
    check_profile_device(cost_model, spec.engine.device, spec.cost_model)
    return cost_model if spec.runs_draft_model else cost_model.with_draft(Affine(0.0, 0.0))


def build_engine(
    spec: EngineSpec, longest_prompt: int, drafter: Drafter | None = None, fit_memory: bool = True
) -> Engine:
    """An engine whose cache fits the longest prompt plus max_tokens (within the model's positions);
    `drafter` replaces the one the spec names (an object made in this process, such as an oracle).
    `fit_memory` False: the spec's batch was sized by its caller (a budget the user gave). The target's
    config is the spec's (`EngineSpec.target_config`), handed on to the runner rather than read again."""
    model = spec.target_config()
    sized = replace(spec.engine, max_model_len=_max_model_len(spec, model, longest_prompt))
    slots = _batch_that_fits(model, sized) if fit_memory else sized.max_batch_size
    engine_config = replace(sized, max_batch_size=slots)
    runner = ModelRunner.from_pretrained(
        spec.model_dir,
        engine_config.max_batch_size,
        engine_config.cache_capacity,
        torch_dtype(engine_config.dtype),
        engine_config.device,
        batch_invariant=engine_config.batch_invariant,
        config=model,
    )
    if engine_config.cuda_graphs:  # a verification forward is at most max_draft + 1 tokens a row
        runner.use_static_forwards(engine_config.max_draft + 1)
    if drafter is None and spec.drafter is not None:
        drafter = make_drafter(spec.drafter, _drafter_context(spec, sized, runner))
    cost_model = engine_cost_model(spec, runner, drafter)
    policy = make_policy(spec.policy if drafter is not None else "none", cost_model)
    return Engine(runner, engine_config, drafter, policy, training_step=spec.step)


def _drafter_context(spec: EngineSpec, sized: EngineConfig, runner: ModelRunner) -> DrafterContext:
    """The drafter sees the engine's settings with the rollout's max_model_len and the batch asked for
    (a draft model's cache has that many slots, as before the memory fit)."""
    return DrafterContext(
        runner.config.vocab_size,
        sized,
        draft_model_dir=spec.draft_model_dir,
        draft_head_dir=spec.draft_head_dir,
        target=runner,
    )


def engine_cost_model(spec: EngineSpec, runner: ModelRunner, drafter: Drafter | None) -> CostModel | None:
    """The policy's prices: the spec's profile, else, off the CPU, the engine's own measurement on its
    device (`device_prices`); None leaves the policy its default (the CPU's)."""
    cost_model = policy_cost_model(spec)
    engine = spec.engine
    if needs_device_profile(engine.device, cost_model, drafter is not None and engine.max_draft > 0):
        cost_model = measure_device_prices(runner, engine.max_draft, Path(spec.model_dir).name)
    measured = drafter.draft_cost() if drafter is not None else None  # a drafter timing itself here
    if cost_model is not None and measured is not None:
        cost_model = cost_model.with_draft(Affine(*measured))
    return cost_model


def _max_model_len(spec: EngineSpec, model: ModelConfig, longest_prompt: int) -> int:
    """A cache as long as the longest prompt plus max_tokens, within the model's positions."""
    return min(model.max_position_embeddings, longest_prompt + spec.max_tokens)


def _batch_that_fits(model: ModelConfig, config: EngineConfig) -> int:
    """As many slots as asked for or as fit the memory at hand (`engine.memory`)."""
    capacity, dtype = config.cache_capacity, config.cache_dtype
    return batch_that_fits(config.max_batch_size, model, capacity, dtype, config.device)
