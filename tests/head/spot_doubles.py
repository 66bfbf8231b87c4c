"""Trainers for the spot trainer's process to run in tests: module-level, so that a spawned process
can import them by name. Each is a `HeadTrainer` whose `step` does one thing more."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from specroll.drafting.draft_head import DraftHeadDrafter
from specroll.head.born_online import born_online_head
from specroll.head.features import FeatureSequence
from specroll.head.shape import ONE_DRAFT
from specroll.head.training import HeadTrainConfig, HeadTrainer

VOCAB, HIDDEN, LAYERS = 64, 32, 4
CONFIG = HeadTrainConfig(depth=1, window=8, windows_per_batch=4, lr=1e-2)


def tiny_drafter(seed: int = 0) -> DraftHeadDrafter:
    """A draft head born for a made-up target of VOCAB tokens and HIDDEN features: no model needed."""
    generator = torch.Generator().manual_seed(seed)
    lm_head = torch.randn(VOCAB, HIDDEN, generator=generator)
    head = born_online_head(lm_head, LAYERS, [[1, 2, 3]], ONE_DRAFT)
    return DraftHeadDrafter(head, torch.randn(VOCAB, HIDDEN, generator=generator))


def tiny_features(drafter: DraftHeadDrafter, num: int = 4, positions: int = 24) -> list[FeatureSequence]:
    """Made-up feature sequences of the drafter's shapes (what a rollout's recorder would give)."""
    generator = torch.Generator().manual_seed(1)
    width = HIDDEN * (1 + len(drafter.feature_layers))
    out = []
    for _ in range(num):
        probs = torch.rand(positions, 8, generator=generator).softmax(-1).sort(-1, descending=True).values
        ids = torch.randint(0, VOCAB, (positions, 8), generator=generator)
        tokens = torch.randint(0, VOCAB, (positions,), generator=generator)
        out.append(FeatureSequence(tokens, torch.randn(positions, width, generator=generator), ids, probs))
    return out


class RecordingTrainer(HeadTrainer):
    """Appends "pid embedding-sum" to `path` at each update: where it ran, on what it read."""

    def __init__(self, path: Path, head, embedding, config) -> None:
        super().__init__(head, embedding, config)
        self.path = path

    def step(self, batch, lr=None):
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()} {float(self.embedding.float().sum()):.3f}\n")
        return super().step(batch, lr)


class StallingTrainer(HeadTrainer):
    """Its first update is a real one; every later one first sleeps `STALL_SECONDS` (a training
    step far slower than a rollout's forward)."""

    STALL_SECONDS = 30.0

    def step(self, batch, lr=None):
        if self.num_steps >= 1:
            time.sleep(self.STALL_SECONDS)
        return super().step(batch, lr)


class RaisingTrainer(HeadTrainer):
    """Its third update raises."""

    def step(self, batch, lr=None):
        if self.num_steps == 2:
            raise RuntimeError("the head's loss went NaN")
        return super().step(batch, lr)


class DyingTrainer(HeadTrainer):
    """Its third update ends the process, as a kill would: no message goes up, and the weights it sent
    last may go with it (their shared memory is the process's). The messages of its first two updates
    have left it by then (`SETTLE_SECONDS`)."""

    SETTLE_SECONDS = 0.5

    def step(self, batch, lr=None):
        if self.num_steps == 2:
            time.sleep(self.SETTLE_SECONDS)
            os._exit(3)
        return super().step(batch, lr)
