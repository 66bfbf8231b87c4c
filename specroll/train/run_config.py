"""A training run's config on disk, and which of its fields a resumed run may change.

A run's future (its rollouts' tokens, rewards and every weight update) is a function of its config, so
a resumed run must keep every field that shapes it: the model, the task, the sampling, the seed, the
optimizer's hyper-parameters, the micro-batching (it sets the order of the gradient sums) and the CPU
threads (they may set the order of a matmul's sums). It may change `steps` (to extend the run),
`shadow_plain` (a measurement beside the run), and, where speculation is lossless token for token
(exact verification with batch-invariant numerics), what only sets the rollout's speed: the drafter,
the speculation policy, the draft limits, the batch size, the cost model, the rollout's workers and
CUDA graphs (static-shape forwards give the dynamic ones' bits under those numerics).

The config is stored flat, one key per field, the `RolloutConfig` fields and those of its engine and
its cluster (`RolloutConfig.as_flat`) beside the `GRPOConfig` ones (their names do not overlap), paths
as absolute strings: a run resumed from another working directory reads the same files, and a path given
relative to it compares equal. A file saved before the engine's settings were one value reads the same
(the same flat keys); one saved before the cluster's were names two of them as the flags do
(`OLD_KEYS`); one saved before the engine's limits beyond these (max_model_len, the KV budget, the
prefill knobs) were stored gets their defaults.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path

from specroll.rollout import RolloutConfig
from specroll.train.grpo_config import GRPOConfig

ALWAYS_FREE = frozenset({"steps", "shadow_plain", "track_drift"})
SPEED_ONLY = frozenset(
    "speculate policy max_draft max_batch_size draft_model_dir cost_model step num_workers dispatch "
    "chunk_tokens backend fastest_of_n draft_head_dir online_head head_lr head_reward_weight "
    "head_between_steps cuda_graphs".split()
)
OLD_KEYS = {"workers": "num_workers", "worker_backend": "backend"}  # files saved before `ClusterConfig`
_PATHS = frozenset(f.name for f in fields(RolloutConfig) if "Path" in str(f.type))


def config_to_dict(config: GRPOConfig) -> dict:
    """The config as flat JSON values: paths as absolute strings."""
    values = {name: value for name, value in asdict(config).items() if name != "rollout"}
    values.update(config.rollout.as_flat())
    return {name: str(v.resolve()) if isinstance(v, Path) else v for name, v in values.items()}


def config_from_dict(values: dict) -> GRPOConfig:
    """`config_to_dict`'s inverse; an unknown key raises ValueError naming it."""
    values = {OLD_KEYS.get(name, name): value for name, value in values.items()}
    rollout_names = RolloutConfig.flat_names()
    train_names = {f.name for f in fields(GRPOConfig)} - {"rollout"}
    unknown = sorted(set(values) - rollout_names - train_names)
    if unknown:
        raise ValueError(f"unknown config fields {unknown}")
    rollout = {name: _typed(name, value) for name, value in values.items() if name in rollout_names}
    train = {name: value for name, value in values.items() if name in train_names}
    return GRPOConfig(RolloutConfig.from_flat(rollout), **train)


def free_fields(config: GRPOConfig) -> frozenset[str]:
    """The fields a run resumed from `config` may change without changing its tokens or weights."""
    return ALWAYS_FREE | SPEED_ONLY if config.rollout.engine.is_lossless else ALWAYS_FREE


def future_changes(saved: GRPOConfig, requested: GRPOConfig) -> list[str]:
    """The fields where `requested` differs from `saved` in a way that changes the run's future, sorted."""
    before, after = config_to_dict(saved), config_to_dict(requested)
    free = free_fields(saved)
    return sorted(name for name in before if name not in free and before[name] != after[name])


def describe_changes(saved: GRPOConfig, requested: GRPOConfig, names: list[str]) -> str:
    """'seed 0 -> 1, lr 1e-05 -> 0.001' for the given fields."""
    before, after = config_to_dict(saved), config_to_dict(requested)
    return ", ".join(f"{name} {before[name]!r} -> {after[name]!r}" for name in names)


def _typed(name: str, value):
    return Path(value) if name in _PATHS and value is not None else value
