"""Building engines from an `EngineSpec`: the spec is validated where it is made, a rollout config
maps onto it, and the factory builds what it names."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from specroll.cluster.engine_worker import EngineWorker
from specroll.drafting.prompt_lookup import PromptLookupDrafter
from specroll.engine.factory import build_engine, policy_cost_model
from specroll.engine.spec import EngineSpec
from specroll.engine_config import EngineConfig
from specroll.policies.cost_model import CostModel
from specroll.policies.fixed import FixedDraftLength, NoSpeculation
from specroll.rollout import RolloutConfig


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("max_tokens", 0, "max_tokens must be positive"),
        ("threads", -1, "threads and step must be >= 0"),
        ("drafter", "nonsense", "unknown drafter 'nonsense'"),
        ("policy", "nonsense", "unknown policy 'nonsense'"),
    ],
)
def test_a_bad_spec_is_refused_where_it_is_made(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        EngineSpec(**{"model_dir": tmp_path, "max_tokens": 8, field: value})


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("max_batch_size", -1, "max_batch_size must be positive"),
        ("max_draft", -1, "max_draft must be >= 0"),
        ("verify", "approximate", "verify mode must be one of exact, rejection"),
        ("sampling_rule", "nonsense", "'nonsense'"),
        ("device", "auto", "resolve 'auto' first"),
        ("dtype", "int8", "dtype must be one of float32, bfloat16, float16, got 'int8'"),
    ],
)
def test_bad_engine_settings_are_refused_once_where_they_are_made(field, value, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**{field: value})


def test_a_rollout_config_maps_onto_its_engine_spec(qwen2_dir, tmp_path):
    cost = tmp_path / "fit.cost.json"
    CostModel(c_base=0.01, c_tok=0.001).save(cost)  # a CPU's, as the rollout's device
    engine = EngineConfig(max_batch_size=4, max_draft=3, seed=9)
    carried = dict(policy="fixed-2", cost_model=cost, step=5, threads=1)  # the spec's as the rollout's
    config = RolloutConfig(
        model_dir=qwen2_dir, max_tokens=40, engine=engine, speculate="prompt-lookup", **carried
    )
    spec = config.engine_spec()
    head_dir = qwen2_dir / "draft-head"
    drafting = dict(drafter="prompt-lookup", draft_model_dir=config.draft_model_dir, draft_head_dir=head_dir)
    assert spec == EngineSpec(qwen2_dir, 40, engine, **drafting, **carried)
    assert pickle.loads(pickle.dumps(spec)) == spec  # it travels to worker processes
    assert RolloutConfig(model_dir=qwen2_dir, speculate="off").engine_spec().drafter is None


def test_the_factory_builds_what_the_spec_names(qwen2_dir):
    engine = EngineConfig(max_batch_size=3, max_draft=2, seed=4)
    options = dict(drafter="prompt-lookup", policy="fixed-2", step=6)
    spec = EngineSpec(qwen2_dir, 20, engine, threads=1, **options)
    built = build_engine(spec, longest_prompt=11)
    assert built.config == replace(engine, max_model_len=31)  # the spec's settings, its cache sized
    parts = built.parts_for_testing()
    assert built.training_step == 6 and parts.runner.cache.num_slots == 3
    assert isinstance(parts.drafter, PromptLookupDrafter) and isinstance(parts.policy, FixedDraftLength)
    plain = build_engine(EngineSpec(qwen2_dir, 20, policy="fixed-2", threads=1), longest_prompt=11)
    plain_parts = plain.parts_for_testing()
    assert plain_parts.drafter is None and isinstance(plain_parts.policy, NoSpeculation)  # nothing to draft
    assert parts.runner.static is None
    graphed = build_engine(
        EngineSpec(qwen2_dir, 20, replace(engine, cuda_graphs=True), threads=1, **options), longest_prompt=11
    )
    static = graphed.parts_for_testing().runner.static
    assert static.max_width == 3  # a verification forward: max_draft + 1 tokens a row


def test_model_free_drafting_is_priced_at_nothing(tmp_path):
    path = tmp_path / "fit.cost.json"
    CostModel(c_base=0.01, c_tok=0.001, draft_base=0.002, draft_row=0.0001).save(path)
    assert not policy_cost_model(EngineSpec(tmp_path, 8, drafter="suffix", cost_model=path)).has_draft_model
    with_draft_model = policy_cost_model(EngineSpec(tmp_path, 8, drafter="draft-model", cost_model=path))
    assert with_draft_model.draft_base == 0.002
    assert policy_cost_model(EngineSpec(tmp_path, 8, drafter="suffix")) is None


def test_a_worker_takes_a_typed_spec_only(qwen2_dir):
    with pytest.raises(TypeError, match="EngineSpec, got RolloutConfig"):
        EngineWorker(0, RolloutConfig(model_dir=qwen2_dir), 8)
