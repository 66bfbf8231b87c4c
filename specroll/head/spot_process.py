"""The spot trainer in a process of its own: online updates of a draft head that cost the rollout
nothing it can measure (TLT §4's spot trainer, issue 65).

```
 rollout's process                                   spot trainer's process (`head.spot_worker`)
 ────────────────────────────────────────            ───────────────────────────────────────────
 engine step ─► drafter.propose ◄─ swap between       torch on 1 thread, nice 10
      ▲              forwards (`offer_weights`)       FeatureBuffer ─► HeadTrainer.step ─► ...
      │                     ▲                                 ▲                    │
 after the rollout:         └── receiver thread ◄── results ──┼── Progress, Weights│
   add(features) ── commands ─────────────────────────────────┘   (every publish_every updates)
 resume: the target's embeddings copied into the shared tensor the trainer reads
```

The rollout's thread never waits on training: it puts a command on a queue, and the receiver thread
(which sleeps in a queue read) offers each weight set to the drafter, which swaps it in between two
forwards. Only `pause` and `train_now`, called between rollouts, wait for the trainer. Feature
tensors and weights travel through shared memory. A failure of the trainer's process (an exception,
or a death) never reaches the rollout: the drafter keeps the last weights it was offered, `failure`
says what happened, and a warning says so once.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
import warnings
from pathlib import Path

import torch.multiprocessing as mp

from specroll.drafting.protocol import TrainableHead
from specroll.head.features import FeatureSequence
from specroll.head.spot import SpotStats
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
from specroll.head.spot_worker import MakeTrainer, serve
from specroll.head.training import HeadTrainConfig, HeadTrainer

RECEIVE_SECONDS = 0.2  # how often the receiver thread looks whether the trainer's process still lives
STOP_SECONDS = 10.0  # how long `stop` waits for the process before it ends it


class ProcessSpotTrainer:
    """The spot trainer's front in the rollout's process: `resume` and `pause` around a rollout, `add`
    its features, `train_now` between rollouts, `wait_for_updates`, `save`, `stop`."""

    def __init__(
        self,
        head: TrainableHead,
        config: HeadTrainConfig = HeadTrainConfig(lr=3e-4),
        publish_every: int = 5,
        make_trainer: MakeTrainer = HeadTrainer,
    ) -> None:
        self.live_head = head  # the drafter's, which drafts with the weights offered to it
        self.config = config
        self.saved_head = head.trainable_copy()  # the latest weights land here for `save`
        self.stats = SpotStats()
        self.num_positions = 0  # in the trainer's buffer (its bound kept here too)
        self.failure: str | None = None  # the trainer process's failure, once it has failed
        self._latest: dict | None = None
        self._max_positions = 200_000
        self._tokens = itertools.count(1)
        self._done: set[int] = set()
        self._progress = threading.Condition()  # notified on every message and on the process's end
        self._is_running = False
        self._stopping = False  # `stop` ends the process: not a failure
        self._is_receiving = True  # until the receiver thread has read the trainer's last message
        self._embedding = head.embedding.detach().clone().share_memory_()  # (V, H) what the trainer reads
        context = mp.get_context("spawn")
        self._commands = context.Queue()
        self._results = context.Queue()
        self.process = context.Process(
            target=serve,
            args=(self._commands, self._results, head.trainable_copy(), self._embedding, config),
            kwargs={"publish_every": publish_every, "make_trainer": make_trainer},
            name="specroll-spot-trainer",
            daemon=True,
        )
        self.process.start()
        self._receiver = threading.Thread(target=self._receive, name="specroll-spot-receiver", daemon=True)
        self._receiver.start()

    @property
    def is_alive(self) -> bool:
        return self.failure is None and self._is_receiving

    def add(self, step: int, sequences: list[FeatureSequence], weights: list[float]) -> None:
        """Buffer a step's feature sequences in the trainer (their tensors move to shared memory)."""
        self.num_positions += sum(s.num_positions for s in sequences)  # the trainer drops its oldest past
        self.num_positions = min(self.num_positions, self._max_positions)  # its bound: a report, not a count
        self._send(AddFeatures(step, list(sequences), list(weights)))

    def resume(self) -> None:
        """Train while the rollout runs, on the target's embeddings as they stand now (the policy's
        update changed them: the head reads them)."""
        self._refresh_embedding()
        self._is_running = True
        self._send(Resume())

    def pause(self) -> None:
        """Stop updating; returns once the update under way ended and its weights were offered."""
        self._is_running = False
        self._wait_done(self._send_token(Pause))

    def train_now(self, updates: int) -> float:
        """`updates` updates on every core the rollout's process may use (the rollout is not running),
        then the weights are offered; the seconds they took, waiting included."""
        started = time.perf_counter()
        self._refresh_embedding()
        threads = len(os.sched_getaffinity(0))
        self._wait_done(self._send_token(lambda token: TrainNow(token, updates, threads)))
        return time.perf_counter() - started

    def wait_for_updates(self, num_updates: int) -> bool:
        """Block until `num_updates` updates have run in all, or the trainer has ended; whether they ran."""
        with self._progress:
            self._progress.wait_for(lambda: self.stats.num_updates >= num_updates or not self.is_alive)
            return self.stats.num_updates >= num_updates

    def save(self, directory: Path) -> Path:
        """The head as last offered (as started, before any), where `--draft-head` reads it."""
        if self._latest is not None:
            self.saved_head.load_state_dict(self._latest)
        return self.saved_head.save(directory)

    def stop(self) -> None:
        self._stopping = True
        self._commands.put(Stop())  # a failed trainer's process waits for it too
        self.process.join(STOP_SECONDS)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self._receiver.join()

    def _refresh_embedding(self) -> None:
        """The target's embeddings, as the policy's last update left them, into the trainer's copy;
        only while the trainer is paused (it reads them in every update)."""
        if not self._is_running:
            self._embedding.copy_(self.live_head.embedding.detach())

    def _send(self, command) -> None:
        if self.failure is None:
            self._commands.put(command)

    def _send_token(self, make) -> int:
        token = next(self._tokens)
        self._send(make(token))
        return token

    def _wait_done(self, token: int) -> None:
        with self._progress:
            self._progress.wait_for(lambda: token in self._done or not self.is_alive)
            self._done.discard(token)

    def _receive(self) -> None:
        """The receiver thread: each message from the trainer, until the process has ended."""
        try:
            while self._take(self._next_result()):
                pass
        finally:
            with self._progress:
                self._is_receiving = False
                self._progress.notify_all()

    def _next_result(self):
        while True:
            try:
                return self._results.get(timeout=RECEIVE_SECONDS)
            except queue.Empty:
                if not self.process.is_alive():
                    return self._ended()
            except Exception:  # noqa: BLE001 (weights whose shared memory went with a process that died)
                if not self.process.is_alive():
                    return self._ended()

    def _ended(self):
        """The process is gone and said nothing more: stopped, or killed (a `Failed` it never sent)."""
        if self.process.exitcode == 0 or self._stopping:
            return None
        return Failed(f"the spot trainer's process ended with exit code {self.process.exitcode}")

    def _take(self, message) -> bool:
        """Act on one message; False once there will be no more."""
        if message is None:
            return False
        if isinstance(message, Weights):
            self._latest = message.state
            self.live_head.offer_weights(message.state)
        with self._progress:
            self._count(message)
            self._progress.notify_all()
        if isinstance(message, Failed):
            self._fail(message.message)
            return False
        return True

    def _count(self, message) -> None:
        if isinstance(message, Progress):
            self.stats.num_updates = message.num_updates
            self.stats.busy_seconds = message.busy_seconds
            self.stats.last_overlap = message.overlap
        elif isinstance(message, Weights):
            self.stats.num_published += 1
        elif isinstance(message, Done):
            self._done.add(message.token)

    def _fail(self, message: str) -> None:
        self.failure = message
        last = message.strip().splitlines()[-1] if message.strip() else message
        warnings.warn(
            f"the spot trainer failed after {self.stats.num_updates} updates ({last}); the rollout goes "
            f"on drafting with the head's last weights ({self.stats.num_published} offered)",
            RuntimeWarning,
            stacklevel=1,
        )
