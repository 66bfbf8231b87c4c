"""What a GRPO run is: the rollout of every step and the training's settings (`GRPOTrainer`'s input,
kept with a run's checkpoints so that a resumed run can refuse different settings)."""

from __future__ import annotations

from dataclasses import dataclass

from specroll.rollout import RolloutConfig


@dataclass(frozen=True)
class GRPOConfig:
    rollout: RolloutConfig  # the model, task, group size, sampling and speculation of every step
    steps: int = 8
    dataset_size: int = 0  # problems drawn once and visited epoch by epoch; 0 = num_prompts
    lr: float = 1e-5
    clip_eps: float = 0.2
    kl_coef: float = 0.0  # > 0 keeps a frozen copy of the initial policy as the reference
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 8  # responses per forward/backward (memory: B x T x vocab logits)
    shadow_plain: bool = False  # also run each step's rollout without speculation, and compare
    track_drift: bool = False  # keep the initial policy to report each step's KL to it (`drift_kl`)
    online_head: bool = False  # train the draft head on the rollouts' hidden states as the run goes
    head_lr: float = 3e-4
    head_reward_weight: float = 0.0  # ReSpec: a response's head loss weighs 1 + this x its reward
    head_between_steps: int = 0  # > 0: the online head's updates after each rollout, none during it

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.dataset_size and self.dataset_size < self.rollout.num_prompts:
            raise ValueError(
                f"dataset_size ({self.dataset_size}) must be >= num_prompts ({self.rollout.num_prompts})"
            )
        if self.lr <= 0 or not 0 < self.clip_eps < 1 or self.kl_coef < 0 or self.micro_batch_size < 1:
            raise ValueError("need lr > 0, 0 < clip_eps < 1, kl_coef >= 0 and micro_batch_size >= 1")
        if self.head_lr <= 0 or self.head_reward_weight < 0 or self.head_between_steps < 0:
            raise ValueError(
                f"need head_lr > 0, head_reward_weight >= 0 and head_between_steps >= 0, got "
                f"{self.head_lr}, {self.head_reward_weight}, {self.head_between_steps}"
            )
        if self.head_between_steps and not self.online_head:
            raise ValueError("head_between_steps schedules the online head: it needs online_head")
