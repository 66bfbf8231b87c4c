"""Drafting decoupled from verification (SpecActor §: decoupled drafting): model-free drafters run in a
process of their own and draft ahead, so the engine's step never waits for a draft.

The engine runs its forwards on one core; a drafter called inside its step adds its time to every
forward, and a Python thread drafting beside the forward slows it through the interpreter lock.
`AheadDrafter` is the drafter's front in the engine's process and drafts nothing there: its lifecycle
calls only note events, and `propose` sends the events noted since its last call as one message (the
queue's feeder thread sleeps but for writing it to the pipe), takes whatever
drafts the drafting process (`ahead_worker`) has sent back meanwhile, and answers each query with the
part of its request's newest draft that still continues its context (`ahead_window`), or nothing. It
never blocks on the other process. The drafts lag verification by a forward or so; a draft window
longer than a forward commits (8 tokens, against max_draft + 1) leaves them tokens to offer.

Losslessness does not depend on the other process at all: exact verification keeps only what the target
itself produces. Should that process fail or die, the drafter warns once and drafts nothing from then
on, and the rollout goes on. `close()` (or dropping the drafter) ends the process.

The process is spawned, not forked (a fork of a process running torch's threads is unsafe), so a
script that builds this drafter must guard its entry point with `if __name__ == "__main__":`; one that
does not loses the drafts (the process dies at its start, with the warning), never the rollout.
"""

from __future__ import annotations

import multiprocessing
import queue
import warnings
import weakref
from typing import Callable, Sequence

from specroll.drafting.ahead_window import AheadDraft, usable_tokens
from specroll.drafting.ahead_worker import (
    DEFAULT_WINDOW,
    AdvanceStep,
    Begin,
    Drafted,
    Event,
    EventBatch,
    Failed,
    Finish,
    Observe,
    Ready,
    Reply,
    Settings,
    serve,
)
from specroll.drafting.protocol import BaseDrafter, Draft, Drafter, DraftQuery, RequestInfo

MAX_BATCHES_IN_FLIGHT = 2  # beyond this, events wait and travel merged into one batch


class _DraftingProcess:
    """The drafting process and its two queues. It references no drafter, so a finalizer may hold it."""

    def __init__(self, make_drafter: Callable[[], Drafter], window: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.inbox, self.outbox = context.Queue(), context.Queue()
        self.process = context.Process(
            target=serve,
            args=(make_drafter, window, self.inbox, self.outbox),
            name="specroll-ahead-drafter",
            daemon=True,  # never outlives the rollout's process
        )
        self.process.start()

    def send(self, batch: EventBatch) -> None:
        self.inbox.put_nowait(batch)  # the queue's feeder thread writes it to the pipe

    def replies(self) -> list[Reply]:
        """Every reply that has arrived, without waiting."""
        replies = []
        while True:
            try:
                replies.append(self.outbox.get_nowait())
            except queue.Empty:
                return replies

    def reply(self, timeout: float) -> Reply | None:
        try:
            return self.outbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self, grace: float = 1.0) -> None:
        """Ask the process to stop, then terminate it if it has not within `grace` seconds."""
        if self.process.is_alive():
            try:
                self.inbox.put_nowait(None)
            except (ValueError, OSError):  # the queue is closed already
                pass
            self.process.join(grace)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(grace)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(grace)
        self.inbox.cancel_join_thread()  # a dead reader must not hold the interpreter's exit
        self.inbox.close()
        self.outbox.close()


class AheadDrafter(BaseDrafter):
    """Answers each query from drafts made ahead in another process by `make_drafter()`'s drafter.

    make_drafter: builds the inner drafter inside the drafting process; it must pickle (a module-level
                  function), and the drafter it builds must draft from the lifecycle alone (model-free).
    window:       tokens per drafted chain (the draft window).
    """

    name = "suffix-ahead"
    drafts_trees = False

    def __init__(self, make_drafter: Callable[[], Drafter], window: int = DEFAULT_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self._process = _DraftingProcess(make_drafter, window)
        self._finalizer = weakref.finalize(self, self._process.close)
        self._pending: list[Event] = []  # events not yet sent; they travel as batch `_next_batch`
        self._next_batch = 0
        self._last_drafted = -1  # the last batch the process answered
        self._begun_in: dict[int, int] = {}  # live request id -> the batch its Begin travels in
        self._settings: dict[int, Settings] = {}  # live request id -> the settings last sent
        self._drafts: dict[int, AheadDraft] = {}  # live request id -> its newest draft
        self.is_ready = False  # the process built its drafter
        self.failure: str | None = None  # why the process stopped drafting, once it has

    # ---- the lifecycle: noted, sent with the next proposal -------------------------------------------

    def begin(self, info: RequestInfo) -> None:
        self._begun_in[info.request_id] = self._next_batch
        self._drafts.pop(info.request_id, None)
        self._note(Begin(info))

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self._note(Observe(request_id, tuple(token_ids)))

    def finish(self, request_id: int) -> None:
        for held in (self._begun_in, self._settings, self._drafts):
            held.pop(request_id, None)
        self._note(Finish(request_id))

    def advance_step(self, step: int) -> None:
        self._note(AdvanceStep(step))

    def _note(self, event: Event) -> None:
        if self.is_drafting:
            self._pending.append(event)
            if len(self._pending) >= max(1, len(self._begun_in)):  # about a forward's worth
                self._exchange()

    def _exchange(self) -> None:
        """Send what was noted and take what was drafted, waiting for nothing: once a forward whether
        or not the policy asks for drafts, so the drafts are there when it does (the policy's first
        probes find them) and the replies never pile up."""
        self._send_pending()
        was_alive = self._process.process.is_alive()  # read first: see `_take`
        self._take(self._process.replies(), was_alive)

    # ---- proposing ---------------------------------------------------------------------------------

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        """Send what was noted, take what was drafted, answer from it: no waiting on the process."""
        if self.is_drafting:
            self._note_settings(queries)
            self._exchange()
        return [self._answer(q) for q in queries]

    @property
    def pid(self) -> int | None:
        """The drafting process's id."""
        return self._process.process.pid

    @property
    def is_drafting(self) -> bool:
        """The process drafts: it has not failed, and the drafter was not closed."""
        return self.failure is None and self._finalizer.alive

    def wait_until_ready(self, timeout: float) -> bool:
        """Block until the process has built its drafter (at most `timeout` seconds): for a caller that
        wants drafts from the first forwards on (a test, a benchmark's warm-up). Whether it is ready."""
        if not self.is_ready and self.is_drafting:
            reply = self._process.reply(timeout)
            self._take([] if reply is None else [reply], was_alive=True)
        return self.is_ready

    def draft_cost(self) -> tuple[float, float]:
        """Nothing a draft token for the policy's prices: the drafting runs in the other process, and
        the engine's thread pays one exchange a forward (tens of microseconds), drafting or not."""
        return (0.0, 0.0)

    def close(self) -> None:
        """End the drafting process (also done when the drafter is dropped); nothing is drafted after."""
        self._pending.clear()
        self._drafts.clear()
        self._finalizer()

    def _note_settings(self, queries: Sequence[DraftQuery]) -> None:
        for q in queries:
            settings = Settings(q.request_id, q.temperature, q.top_k, q.top_p, q.noise_key)
            if q.request_id in self._begun_in and self._settings.get(q.request_id) != settings:
                self._settings[q.request_id] = settings
                self._note(settings)

    def _send_pending(self) -> None:
        if not self._pending or self._next_batch - self._last_drafted > MAX_BATCHES_IN_FLIGHT:
            return
        try:
            self._process.send(EventBatch(self._next_batch, tuple(self._pending)))
        except Exception as error:  # a closed queue: the drafter stops drafting, the rollout goes on
            self._fail(f"sending to the drafting process failed: {error!r}")
            return
        self._pending.clear()
        self._next_batch += 1

    def _take(self, replies: list[Reply], was_alive: bool) -> None:
        """Keep each live request's newest draft. `was_alive` is read before the replies were: a
        process found dead after that sent everything it ever will, so the replies came first."""
        for reply in replies:
            if self.failure is not None:
                return
            if isinstance(reply, Ready):
                self.is_ready = True
            elif isinstance(reply, Drafted):
                self._keep(reply)
            elif isinstance(reply, Failed):
                self._fail(reply.cause)
        if not was_alive and self.failure is None:
            self._fail(f"the drafting process died (exit code {self._process.process.exitcode})")

    def _keep(self, drafted: Drafted) -> None:
        self._last_drafted = drafted.batch_index
        for draft in drafted.drafts:
            begun_in = self._begun_in.get(draft.request_id)
            if begun_in is not None and begun_in <= drafted.batch_index:  # not an earlier request's
                self._drafts[draft.request_id] = draft

    def _answer(self, query: DraftQuery) -> Draft:
        draft = self._drafts.get(query.request_id)
        if draft is None:
            return Draft(query.request_id)
        tokens = usable_tokens(draft, query.context, query.budget)
        if not tokens:  # stale or used up: the context only grows, so it stays so
            del self._drafts[query.request_id]
        return Draft(query.request_id, tokens, source=draft.source if tokens else "")

    def _fail(self, cause: str) -> None:
        if self.failure is not None:
            return
        self.failure = cause
        warnings.warn(
            f"{self.name}: drafting stopped, nothing is drafted from now on: {cause}", RuntimeWarning
        )
        self.close()
