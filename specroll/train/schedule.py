"""Which problems each training step prompts: a fixed dataset visited epoch by epoch.

The dataset is drawn once; every epoch walks a fresh seeded permutation of it, `num_prompts` problems
a step, so a problem recurs once an epoch, as in RL over a dataset (the setting of DAS's history
drafting). With a dataset of exactly `num_prompts` problems every step prompts all of them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class EpochSchedule:
    problem_ids: tuple[int, ...]  # the dataset, by prompt_id
    num_prompts: int  # problems per step
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.num_prompts <= len(self.problem_ids):
            raise ValueError(
                f"a step takes 1..{len(self.problem_ids)} problems of the dataset, "
                f"got num_prompts={self.num_prompts}"
            )

    def step_problems(self, step: int) -> list[int]:
        """The prompt_ids of step `step` (0-based); an epoch's remainder carries into the next."""
        start = step * self.num_prompts
        return [self._at(i) for i in range(start, start + self.num_prompts)]

    def _at(self, index: int) -> int:
        epoch, offset = divmod(index, len(self.problem_ids))
        return self._epoch_order(epoch)[offset]

    def _epoch_order(self, epoch: int) -> Sequence[int]:
        order = list(self.problem_ids)
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order
