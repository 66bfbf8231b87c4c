"""The draft head trained online in `specroll train` (TLT's spot trainer, ReSpec's reward weighting):
the head of whichever drafter holds one (`draft-head`, `head+suffix`: `Drafter.trainable_head`).

While a step's rollout runs, the spot trainer updates a copy of the head on the buffered hidden states
of earlier steps and offers its weights to the drafter, which swaps them in between forwards. It runs
in a process of its own (`head.spot_process`): the rollout never waits for it, and if it fails the
rollout goes on drafting with the last weights it offered (`failure` says why, a warning says so).
Once the rollout is done (before the policy's update, which would change the targets' output layer), the
rollout's own hidden states and tokens go into the buffer, each response weighted by its reward when
`head_reward_weight` > 0. With `between_steps` > 0 there is no training during the rollout (the
engine keeps every core): that many updates run once the step's responses are buffered, before the
policy's update (in the trainer's process, on every core), and the next rollout drafts with them. The
head never changes a token: only how many drafts are kept.

A target with no head of its own gets one born with the run (`born_head_changes`,
`head.born_online`): saved in the run's directory, drafting beside the suffix drafters (`head+suffix`)
once the spot trainer has offered it weights, and saved there again as it trains (`save`), so that
the run leaves a trained head behind for `--draft-head`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from specroll.drafting.protocol import TrainableHead
from specroll.head.born_online import born_online_head
from specroll.head.shape import default_shape
from specroll.head.recorder import HiddenRecorder
from specroll.head.spot_process import ProcessSpotTrainer
from specroll.head.training import HeadTrainConfig
from specroll.model.loader import read_config

DRAFTERS_WITH_HEAD = ("on", "draft-head", "head+suffix")  # `speculate` values an online head can train


def born_head_changes(rollout, lm_head_weight, prompts: Sequence[Sequence[int]], stop_token_ids, directory):
    """The rollout fields a run whose online head is born with it changes (`draft_head_dir`, and
    `speculate` to draft beside the suffix drafters where it is `on`), having saved the new head
    (`born_online_head`) in `directory`; None where the target has a head already or the drafter
    holds none."""
    if rollout.speculate not in DRAFTERS_WITH_HEAD or rollout.has_head:
        return None
    if directory is None:
        raise ValueError("a head born with the run needs a directory to keep it in (the run's)")
    model = read_config(rollout.model_dir)
    device = "cpu" if str(rollout.engine.device) == "cpu" else "cuda"
    head = born_online_head(
        lm_head_weight, model.num_layers, prompts, default_shape(device), stop_token_ids,
        Path(rollout.model_dir).resolve().name,
    )  # fmt: skip
    head.save(directory)
    speculate = "head+suffix" if rollout.speculate == "on" else rollout.speculate
    return {"draft_head_dir": Path(directory), "speculate": speculate}


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
        depth = head.train_depth  # online updates unroll as deep as the warm start did
        self.spot = ProcessSpotTrainer(head, HeadTrainConfig(depth=depth, lr=lr, seed=seed))
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

    def save(self, directory: Path) -> Path:
        """The head as trained so far, where `--draft-head` reads it."""
        return self.spot.save(directory)

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
        self.spot.add(step, [sequences[rid] for rid in ids], weights)
        if self.between_steps:
            self.between_seconds = self.spot.train_now(self.between_steps)

    def metrics(self) -> dict:
        return {
            "head_updates": self.spot.stats.num_updates,
            "head_swaps": self.head.num_swaps,
            "head_positions": self.spot.num_positions,
            "head_seconds": self.between_seconds,
        }

    @property
    def failure(self) -> str | None:
        """Why the spot trainer stopped, once it has failed (the rollout drafts on its last weights)."""
        return self.spot.failure

    def close(self) -> None:
        self.spot.stop()
