"""The spot trainer's own process: updates a copy of the draft head on buffered features and sends its
weights up (`head.spot_process` starts it and speaks to it; `head.spot_messages` is what they say).

It runs torch on one thread, at a lower scheduling priority than the rollout (`NICENESS`): where the
machine has a core the engine leaves idle it trains there at full speed, and where the two meet on a
core the kernel runs the engine first. No lock, no interpreter and no thread pool of the rollout's
is shared with it. While paused it blocks on its commands; while running it trains whenever the
buffer holds features, reading a command between two updates.
"""

from __future__ import annotations

import os
import queue
import random
import time
import traceback
from typing import Callable

import torch

from specroll.head.buffer import FeatureBuffer
from specroll.head.spot_messages import (
    AddFeatures,
    Done,
    Failed,
    Pause,
    Progress,
    Resume,
    Stop,
    TrainNow,
    Weights,
)
from specroll.head.training import HeadTrainConfig, HeadTrainer

NICENESS = 10  # the trainer yields a shared core to the rollout (nice 0): CFS gives it ~1/10 of the share
IDLE_SECONDS = 0.05  # how long a running trainer with nothing buffered waits for a command
LINGER_SECONDS = 60.0  # how long a failed trainer waits for `Stop` before it ends

MakeTrainer = Callable[..., HeadTrainer]  # (head, embedding, config) -> the trainer (tests pass a double)


def serve(
    commands, results, head, embedding, config: HeadTrainConfig, publish_every: int, make_trainer
) -> None:
    """The process's body: settle, then train as told until `Stop`; any failure goes up as `Failed`."""
    try:
        _settle()
        TrainerLoop(make_trainer(head, embedding, config), config, publish_every, results).run(commands)
    except BaseException:  # noqa: BLE001 (whatever it was, the rollout hears of it and goes on)
        results.put(Failed(traceback.format_exc()))
        _linger(commands)
        raise


def _linger(commands) -> None:
    """Stay until told to stop (or `LINGER_SECONDS`): the weights sent last live in this process's
    shared memory, and the rollout reads them before it reads the failure."""
    deadline = time.monotonic() + LINGER_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        try:
            if isinstance(commands.get(timeout=left), Stop):
                return
        except queue.Empty:
            return


def _settle() -> None:
    torch.set_num_threads(1)  # one core: the rest are the rollout's
    os.nice(NICENESS)


class TrainerLoop:
    """Owns the trainer process's state: the buffer, the trainer, running or paused, updates so far."""

    def __init__(self, trainer: HeadTrainer, config: HeadTrainConfig, publish_every: int, results) -> None:
        self.trainer = trainer
        self.config = config
        self.publish_every = publish_every
        self.results = results
        self.buffer = FeatureBuffer()
        self.rng = random.Random(config.seed)
        self.is_running = False
        self.num_updates = 0
        self.num_published_at = 0  # the update count whose weights went up last
        self.busy_seconds = 0.0

    def run(self, commands) -> None:
        while True:
            command = self._next_command(commands)
            if isinstance(command, Stop):
                return
            if command is not None:
                self.handle(command)
            elif not self.update():
                self._wait(commands)

    def _next_command(self, commands):
        if not self.is_running:
            return commands.get()  # paused: nothing to do until told
        try:
            return commands.get_nowait()
        except queue.Empty:
            return None

    def _wait(self, commands) -> None:
        """Nothing buffered yet: wait for a command (features, most likely) a little, then look again."""
        try:
            command = commands.get(timeout=IDLE_SECONDS)
        except queue.Empty:
            return
        if isinstance(command, Stop):
            commands.put(command)  # `run` reads it next
        else:
            self.handle(command)

    def handle(self, command) -> None:
        if isinstance(command, AddFeatures):
            self.buffer.add(command.step, command.sequences, command.weights)
        elif isinstance(command, Resume):
            self.is_running = True
        elif isinstance(command, Pause):
            self.is_running = False
            self.publish()
            self.results.put(Done(command.token))
        elif isinstance(command, TrainNow):
            self.train_now(command)
        else:
            raise TypeError(f"the spot trainer process got {command!r}, not a command")

    def train_now(self, command: TrainNow) -> None:
        """`num_updates` updates on `num_threads` threads (the rollout waits for them), then publish."""
        torch.set_num_threads(command.num_threads)
        try:
            for _ in range(command.num_updates):
                if not self.update(publish=False):
                    break
        finally:
            torch.set_num_threads(1)
        self.publish()
        self.results.put(Done(command.token))

    def update(self, publish: bool = True) -> bool:
        """One update on a batch from the buffer; False where the buffer holds nothing yet."""
        batch = self.buffer.sample(self.config, self.rng)
        if batch is None:
            return False
        started = time.perf_counter()
        metrics = self.trainer.step(batch)
        self.busy_seconds += time.perf_counter() - started
        self.num_updates += 1
        self.results.put(Progress(self.num_updates, self.busy_seconds, metrics.overlap))
        if publish and self.num_updates % self.publish_every == 0:
            self.publish()
        return True

    def publish(self) -> None:
        """The head's weights up, unless these were sent already (or there are none yet)."""
        if self.num_updates == self.num_published_at:
            return
        state = {k: v.detach().clone() for k, v in self.trainer.head.state_dict().items()}
        self.results.put(Weights(state, self.num_updates))
        self.num_published_at = self.num_updates
