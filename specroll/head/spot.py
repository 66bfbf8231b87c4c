"""The spot trainer in a thread of the rollout's process: online updates of a draft head (TLT §4).

The reference the spot trainer in a process of its own (`head.spot_process`, the online head's) is
measured against: a thread here shares the interpreter's lock and the engine's core with the engine's
loop, whose forwards are many short torch calls (BENCHMARKS.md, "The spot trainer in a process of its
own"). It trains its own copy of the head in a background thread on batches from a `FeatureBuffer`, and
every `publish_every` updates offers the copy's weights to the drafter, which swaps them in between
two forwards (`TrainableHead.offer_weights`): the rollout never waits for it. The GRPO trainer
runs it while a rollout runs and pauses it while the policy is updated (that update uses every core,
and it changes the target's embeddings the head reads).

Torch runs each thread's operations on `torch.get_num_threads()` threads, a process-wide setting: with
the engine on one thread, this thread's updates take the second core. The other schedule leaves the
engine every core and trains only between rollouts: `train_now` runs updates in the caller's thread,
on every thread torch has, and offers the result at once.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path


from specroll.drafting.protocol import TrainableHead
from specroll.head.buffer import FeatureBuffer
from specroll.head.training import HeadTrainer, HeadTrainConfig


@dataclass
class SpotStats:
    num_updates: int = 0
    num_published: int = 0
    busy_seconds: float = 0.0
    last_overlap: list[float] | None = None


class SpotTrainer:
    def __init__(
        self,
        head: TrainableHead,
        buffer: FeatureBuffer,
        config: HeadTrainConfig = HeadTrainConfig(lr=3e-4),
        publish_every: int = 5,
    ) -> None:
        self.live_head = head  # the drafter's, which drafts with the weights offered to it
        self.buffer = buffer
        self.config = config
        self.publish_every = publish_every
        # on the live embeddings: the trainer is paused while they change
        self.trainer = HeadTrainer(head.trainable_copy(), head.embedding, config)
        self.stats = SpotStats()
        self._rng = random.Random(config.seed)
        self._running = threading.Event()
        self._stopped = False
        self._updating = threading.Lock()  # held through each update: `pause` waits on it
        self._progress = threading.Condition()  # notified after each update: `wait_for_updates`
        self._has_ended = False  # the background thread returned
        self._thread = threading.Thread(target=self._loop, name="specroll-spot-trainer", daemon=True)
        self._thread.start()

    def add(self, step: int, sequences: list, weights: list[float]) -> None:
        """Buffer a step's feature sequences (`FeatureSequence`)."""
        self.buffer.add(step, sequences, weights)

    def save(self, directory: Path) -> Path:
        """The head as trained so far, where `--draft-head` reads it."""
        return self.trainer.head.save(directory)

    def resume(self) -> None:
        self._running.set()

    def pause(self) -> None:
        """Stop updating and wait for the update under way; offers what was trained so far."""
        self._running.clear()
        with self._updating:  # the update under way ends; no other starts while paused
            self._publish()

    def train_now(self, updates: int) -> float:
        """`updates` updates in the caller's thread (the thread stays paused), then the weights are
        offered; the seconds they took. Fewer if the buffer holds nothing yet."""
        started = time.perf_counter()
        with self._updating:
            for _ in range(updates):
                if not self._update():
                    break
            self._publish()
        return time.perf_counter() - started

    def stop(self) -> None:
        self._stopped = True
        self._running.set()
        self._thread.join()

    def wait_for_updates(self, num_updates: int) -> bool:
        """Block until `num_updates` updates have run in all, or the background thread has ended
        (stopped, or failed); whether they ran. Call it only while the trainer runs."""
        with self._progress:
            self._progress.wait_for(lambda: self.stats.num_updates >= num_updates or self._has_ended)
            return self.stats.num_updates >= num_updates

    def update_if_running(self) -> bool:
        """The background thread's step: one update, unless paused or the buffer holds nothing yet."""
        with self._updating:
            return self._running.is_set() and self._update()

    def _loop(self) -> None:
        try:
            while True:
                self._running.wait()
                if self._stopped:
                    return
                if not self.update_if_running():
                    time.sleep(0.05)  # nothing to learn from yet, or paused meanwhile
        finally:
            with self._progress:  # a waiter for updates that will never come returns
                self._has_ended = True
                self._progress.notify_all()

    def _update(self) -> bool:
        batch = self.buffer.sample(self.config, self._rng)
        if batch is None:
            return False
        started = time.perf_counter()
        metrics = self.trainer.step(batch)
        self.stats.busy_seconds += time.perf_counter() - started
        with self._progress:
            self.stats.num_updates += 1
            self._progress.notify_all()
        self.stats.last_overlap = metrics.overlap
        if self.stats.num_updates % self.publish_every == 0:
            self._publish()
        return True

    def _publish(self) -> None:
        if self.stats.num_updates == 0:
            return
        state = {k: v.detach().clone() for k, v in self.trainer.head.state_dict().items()}
        self.live_head.offer_weights(state)
        self.stats.num_published += 1
