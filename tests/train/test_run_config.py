"""Which config changes a resumed run may make: literal cases."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from specroll.rollout import RolloutConfig
from specroll.engine_config import EngineConfig
from specroll.train.run_config import config_from_dict, config_to_dict, describe_changes, future_changes
from specroll.train.grpo_config import GRPOConfig

SAVED = GRPOConfig(
    RolloutConfig(num_prompts=4, n=4, max_tokens=64, engine=EngineConfig(seed=3), cost_model=Path("c.json")),
    steps=4,
)


def _with(**changes) -> GRPOConfig:
    """SAVED with changes named as the saved file names them: the rollout's and its engine's fields flat."""
    rollout = {k: v for k, v in changes.items() if k in RolloutConfig.flat_names()}
    train = {k: v for k, v in changes.items() if k not in rollout}
    return replace(SAVED, rollout=RolloutConfig.from_flat(SAVED.rollout.as_flat() | rollout), **train)


def test_the_config_round_trips_through_json_values():
    values = config_to_dict(SAVED)
    assert values["seed"] == 3 and values["lr"] == SAVED.lr
    assert values["cost_model"] == str(Path.cwd() / "c.json")
    assert isinstance(values["model_dir"], str)
    assert config_from_dict(values) == _with(cost_model=Path.cwd() / "c.json")
    assert config_to_dict(_with(cost_model=Path.cwd() / "c.json")) == values  # relative or absolute: same
    with pytest.raises(ValueError, match="colour"):
        config_from_dict({**values, "colour": "red"})


def test_a_config_saved_before_the_engine_limits_were_stored_reads_with_their_defaults():
    limits = ("max_model_len", "kv_budget_tokens", "max_prefill_tokens", "min_prefill_split")
    values = {name: value for name, value in config_to_dict(SAVED).items() if name not in limits}
    assert values["seed"] == 3 and "engine" not in values  # the engine's fields, flat, as ever
    assert config_from_dict(values) == _with(cost_model=Path.cwd() / "c.json")


def test_what_sets_the_runs_future_is_named():
    changed = _with(seed=4, lr=1e-3, model_dir=Path("elsewhere"), micro_batch_size=2, threads=2)
    assert future_changes(SAVED, changed) == ["lr", "micro_batch_size", "model_dir", "seed", "threads"]
    assert describe_changes(SAVED, changed, ["seed"]) == "seed 3 -> 4"


def test_steps_and_speed_may_change_where_speculation_changes_no_token():
    faster = _with(
        steps=10, shadow_plain=True, speculate="off", policy="fixed-2", max_batch_size=8, max_draft=2
    )
    assert future_changes(SAVED, faster) == []
    rejection = _with(verify="rejection")
    assert future_changes(rejection, replace(rejection, steps=10)) == []
    unspeculated = replace(rejection, rollout=replace(rejection.rollout, speculate="off"))
    assert future_changes(rejection, unspeculated) == ["speculate"]  # rejection-sampled tokens follow drafts


def test_a_config_saved_before_the_cluster_was_one_value_reads_the_same():
    values = config_to_dict(_with(num_workers=2, backend="inline"))
    old = {{"num_workers": "workers", "backend": "worker_backend"}.get(k, k): v for k, v in values.items()}
    assert config_from_dict(old) == config_from_dict(values)
    assert config_from_dict(old).rollout.cluster.num_workers == 2


def test_no_flat_name_is_two_fields():
    rollout = RolloutConfig()
    flat = rollout.as_flat()
    held = [rollout.engine, rollout.cluster]
    num_fields = len(fields(RolloutConfig)) - len(held) + sum(len(fields(c)) for c in held)
    assert len(flat) == num_fields == len(RolloutConfig.flat_names())
    assert not set(flat) & ({f.name for f in fields(GRPOConfig)} - {"rollout"})
    assert RolloutConfig.from_flat(flat) == rollout
