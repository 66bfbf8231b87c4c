"""What the rollout's process and the spot trainer's process say to each other (`head.spot_process`).

Down, to the trainer: feature sequences to buffer, resume, pause, train now, stop. Up, to the
rollout: progress after each update, the head's weights, the end of a pause or of a `TrainNow`, and a
failure. Tensors travel through shared memory (torch's multiprocessing queues): a message holds
handles, not copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AddFeatures:
    step: int
    sequences: list  # FeatureSequence
    weights: list[float]


@dataclass(frozen=True)
class Resume:
    pass


@dataclass(frozen=True)
class Pause:
    token: int  # answered by `Done(token)` once the update under way ended and the weights went up


@dataclass(frozen=True)
class TrainNow:
    token: int
    num_updates: int
    num_threads: int  # torch threads for these updates: the rollout is not running, every core is free


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Progress:
    num_updates: int
    busy_seconds: float  # in updates, in all
    overlap: list[float]  # the last update's, per depth


@dataclass(frozen=True)
class Weights:
    state: dict[str, Any]  # the trained copy's `state_dict()`, tensors in shared memory
    num_updates: int


@dataclass(frozen=True)
class Done:
    token: int


@dataclass(frozen=True)
class Failed:
    message: str  # the trainer process's exception and traceback
