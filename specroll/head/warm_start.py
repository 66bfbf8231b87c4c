"""The warm start: a new head for a checkpoint, trained on feature sequences within a time budget.

Sequences are split into training and held-out ones (by sequence, so that no held-out position was
seen); training runs epochs of shuffled windows until the time budget or `max_epochs` is spent,
whichever comes first (the result says which), with a cosine learning rate over the budget; the
held-out overlap per depth is what it reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from specroll.head.features import FeatureSequence
from specroll.drafting.head_model import DraftHead, HeadConfig
from specroll.head.training import (
    HeadTrainer,
    HeadMetrics,
    HeadTrainConfig,
    cosine_lr,
    draft_vocabulary,
    make_batch,
    shuffled_windows,
    windows,
)

TIME, EPOCHS = "time", "epochs"  # the two limits of a warm start


@dataclass(frozen=True)
class Spent:
    """How much of a warm start's budget is spent, by each of its two limits."""

    seconds: float  # training time so far
    epochs: float  # passes over the training windows so far
    fraction: float  # of the time or of the epochs, whichever runs out first (the learning rate's clock)


ProgressFn = Callable[[Spent, HeadMetrics], None]  # after each step: the budget spent, the step's metrics


@dataclass(frozen=True)
class WarmStartConfig:
    seconds: float = 600.0  # the training budget
    max_epochs: int = 20
    draft_vocab_size: int = 8192
    intermediate_size: int = 0  # 0: 8/3 of the target's hidden size, as a Llama MLP (1536 for SmolLM2)
    num_blocks: int = 2
    feature_layers: tuple[int, ...] = ()  # the target's layers the head fuses (the features must carry them)
    held_out_fraction: float = 0.05
    train: HeadTrainConfig = HeadTrainConfig()

    def __post_init__(self) -> None:
        # checked here, where a command builds the config, not when the head is made after the features
        if self.num_blocks < 1 or self.draft_vocab_size < 1 or self.max_epochs < 0:
            raise ValueError(
                "a warm start needs num_blocks >= 1, draft_vocab_size >= 1 and max_epochs >= 0, got "
                f"{self.num_blocks}, {self.draft_vocab_size} and {self.max_epochs}"
            )


@dataclass
class WarmStartResult:
    head: DraftHead
    seconds: float
    num_steps: int
    num_epochs: float
    num_train_positions: int
    held_out: HeadMetrics | None  # loss and overlap per depth on the held-out sequences
    ended_by: str = TIME  # the limit that ended the training: TIME (`seconds`) or EPOCHS (`max_epochs`)


def new_head(
    sequences: Sequence[FeatureSequence],
    lm_head_weight: torch.Tensor,
    config: WarmStartConfig,
    target_name: str = "",
) -> DraftHead:
    vocab_size, hidden_size = lm_head_weight.shape
    head_config = HeadConfig(
        hidden_size,
        vocab_size,
        min(config.draft_vocab_size, vocab_size),
        config.intermediate_size or -(-8 * hidden_size // 3 // 64) * 64,
        config.num_blocks,
        target=target_name,
        feature_layers=config.feature_layers,
        train_depth=config.train.depth,
    )
    head = DraftHead(head_config, draft_vocabulary(sequences, head_config.draft_vocab_size, vocab_size))
    head.init_from_target(lm_head_weight.detach().float().cpu())
    return head


def _spent(seconds: float, steps: int, steps_per_epoch: int, config: WarmStartConfig) -> float:
    """The fraction of the budget spent: of the time or of the epochs, whichever runs out first, so
    the learning rate decays to its end either way (and a run bounded by epochs does not depend on
    how fast the machine was)."""
    return max(seconds / config.seconds, steps / (config.max_epochs * steps_per_epoch))


def warm_start(
    sequences: Sequence[FeatureSequence],
    embedding: torch.Tensor,
    lm_head_weight: torch.Tensor,
    config: WarmStartConfig = WarmStartConfig(),
    progress: ProgressFn | None = None,
    target_name: str = "",
) -> WarmStartResult:
    train, held_out = _split(sequences, config.held_out_fraction)
    if not train:
        raise ValueError("no sequences to train a draft head on")
    head = new_head(train, lm_head_weight, config, target_name)
    trainer = HeadTrainer(head, embedding.detach().float().cpu(), config.train)
    started = time.perf_counter()
    per_epoch = max(len(windows(train, config.train.window, config.train.depth)), 1)
    steps_per_epoch = -(-per_epoch // config.train.windows_per_batch)
    metrics = HeadMetrics(float("nan"))
    epoch = 0
    while epoch < config.max_epochs and time.perf_counter() - started < config.seconds:
        spans = shuffled_windows(train, config.train, epoch)
        for first in range(0, len(spans), config.train.windows_per_batch):
            seconds = time.perf_counter() - started
            spent = _spent(seconds, trainer.num_steps, steps_per_epoch, config)
            if spent >= 1.0:
                break
            batch = make_batch(
                train, spans[first : first + config.train.windows_per_batch], config.train.window
            )
            metrics = trainer.step(batch, cosine_lr(config.train.lr, spent))
            if progress is not None:
                progress(Spent(seconds, trainer.num_steps / steps_per_epoch, min(spent, 1.0)), metrics)
        epoch += 1
    is_epochs_end = trainer.num_steps >= config.max_epochs * steps_per_epoch
    return WarmStartResult(
        head,
        time.perf_counter() - started,
        trainer.num_steps,
        trainer.num_steps / steps_per_epoch,
        sum(s.num_positions for s in train),
        evaluate(trainer, held_out, config.train) if held_out else None,
        EPOCHS if is_epochs_end else TIME,
    )


def evaluate(
    trainer: HeadTrainer, sequences: Sequence[FeatureSequence], config: HeadTrainConfig
) -> HeadMetrics:
    """Mean loss and overlap per depth over every window of `sequences`, weighted by batch."""
    spans = windows(sequences, config.window, config.depth)
    results = [
        trainer.evaluate(make_batch(sequences, spans[i : i + config.windows_per_batch], config.window))
        for i in range(0, len(spans), config.windows_per_batch)
    ]
    depth = len(results[0].overlap)
    return HeadMetrics(
        sum(r.loss for r in results) / len(results),
        [sum(r.overlap[d] for r in results) / len(results) for d in range(depth)],
    )


def _split(
    sequences: Sequence[FeatureSequence], fraction: float
) -> tuple[list[FeatureSequence], list[FeatureSequence]]:
    """Every k-th sequence held out (k = 1 / fraction), at least one of four or more."""
    if len(sequences) < 4 or fraction <= 0:
        return list(sequences), []
    every = max(2, min(round(1 / fraction), len(sequences) // 2))
    held = set(range(every - 1, len(sequences), every))
    return [s for i, s in enumerate(sequences) if i not in held], [sequences[i] for i in sorted(held)]
