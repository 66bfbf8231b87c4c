"""`TrainState`: everything a training run's future depends on once some of its steps are done.

The rollouts' tokens are keyed by (seed, request id, position) and the weights, and the steps' problems
come from the config's seeded schedule, so the state is: the policy's weights, AdamW's state (moments
and step counts), torch's global random generator, the config, and the fingerprint of the initial
policy (the KL reference is rebuilt from `model_dir`, which must still hold the same weights). The
last window of responses rides along to warm the history drafters (`specroll.train.recent_responses`).
The trainer makes and restores it (`GRPOTrainer.state`, `GRPOTrainer.restore`); `checkpointing`
writes and reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import torch

from specroll.train.grpo_config import GRPOConfig
from specroll.train.recent_responses import FinishedResponse


@dataclass
class TrainState:
    """A run after `next_step` steps (steps 0 .. next_step - 1 done): it resumes at step `next_step`."""

    next_step: int
    config: GRPOConfig
    policy: dict[str, torch.Tensor]  # the policy's state_dict (Hugging Face names)
    optimizer: dict  # AdamW's state_dict: {"state": {index: {name: tensor}}, "param_groups": [...]}
    torch_rng: torch.Tensor  # (N,) uint8: torch's global generator (dropout, where a model has any)
    weights_sha256: str  # of `policy`, checked when it is restored
    initial_weights_sha256: str  # of the run's initial policy, the KL reference
    recent_responses: list[FinishedResponse] = field(default_factory=list)
