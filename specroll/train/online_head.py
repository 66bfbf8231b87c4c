"""The draft head trained online in `specroll train` (TLT's spot trainer, ReSpec's reward weighting):
the head of whichever drafter holds one (`draft-head`, `head+suffix`: `Drafter.trainable_head`).

While a step's rollout runs, the spot trainer updates a copy of the head on the buffered hidden states
of earlier steps and offers its weights to the drafter, which swaps them in between forwards. Once the
rollout is done (before the policy's update, which would change the targets' output layer), the
rollout's own hidden states and tokens go into the buffer, each response weighted by its reward when
`head_reward_weight` > 0. With `between_steps` > 0 there is no training during the rollout (the
engine keeps every core): that many updates run once the step's responses are buffered, before the
policy's update, and the next rollout drafts with them. The head never changes a token: only how
many drafts are kept.
"""

from __future__ import annotations

from specroll.drafting.protocol import TrainableHead
from specroll.head.buffer import FeatureBuffer
from specroll.head.recorder import HiddenRecorder
from specroll.head.spot import SpotTrainer
from specroll.head.training import HeadTrainConfig


class OnlineHead:
    def __init__(
        self,
        head: TrainableHead,
        lm_head_weight,
        temperature: float,
        reward_weight: float,
        lr: float,
        seed: int,
        between_steps: int = 0,
    ) -> None:
        self.head = head  # the drafter's: it records features for us and takes our weights
        self.lm_head_weight = lm_head_weight  # the engine's: its values follow the policy
        self.temperature = temperature
        self.reward_weight = reward_weight
        self.recorder = HiddenRecorder()
        head.add_listener(self.recorder)
        self.buffer = FeatureBuffer()
        depth = head.train_depth  # online updates unroll as deep as the warm start did
        self.spot = SpotTrainer(head, self.buffer, HeadTrainConfig(depth=depth, lr=lr, seed=seed))
        self.between_steps = between_steps  # updates after each rollout; 0: the spot trainer during it
        self.between_seconds = 0.0  # the last step's

    @classmethod
    def attach(cls, engine, config) -> "OnlineHead":
        """The online head of a trainer's engine, whose drafter must hold a draft head (`draft-head`,
        `head+suffix`: `Drafter.trainable_head`)."""
        head = engine.trainable_head()
        if head is None:
            raise ValueError(
                "online head training needs a drafter holding a draft head (--speculate draft-head or "
                "head+suffix, or on with a head trained by `specroll head train` for the model)"
            )
        return cls(
            head,
            engine.lm_head_weight(),
            config.rollout.temperature,
            config.head_reward_weight,
            config.head_lr,
            config.rollout.engine.seed,
            config.head_between_steps,
        )

    def resume(self) -> None:
        if not self.between_steps:
            self.spot.resume()

    def after_rollout(self, step: int, result) -> None:
        """Once a step's rollout is done, before the policy's update: stop the spot trainer, buffer
        the step's responses, and on the between-steps schedule train on the buffer now."""
        if not self.between_steps:
            self.spot.pause()
        sequences = self.recorder.take(self.lm_head_weight, self.temperature)
        rewards = {r.request_id: r.reward or 0.0 for r in result.records}
        ids = sorted(sequences)
        weights = [1.0 + self.reward_weight * rewards.get(rid, 0.0) for rid in ids]
        self.buffer.add(step, [sequences[rid] for rid in ids], weights)
        if self.between_steps:
            self.between_seconds = self.spot.train_now(self.between_steps)

    def metrics(self) -> dict:
        return {
            "head_updates": self.spot.stats.num_updates,
            "head_swaps": self.head.num_swaps,
            "head_positions": self.buffer.num_positions,
            "head_seconds": self.between_seconds,
        }

    def close(self) -> None:
        self.spot.stop()
