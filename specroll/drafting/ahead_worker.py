"""The drafting process of an ahead drafter (`specroll.drafting.ahead`): its messages and its body.

The engine's process sends the drafter's lifecycle as batches of events (`EventBatch`), one batch per
verification forward at most; this process applies them, in order, to an inner drafter it builds
itself, keeps each live request's context (prompt + observed tokens), and after each batch drafts a
chain of up to `window` tokens for every live request whose context grew, answering with one `Drafted`
per batch. It drafts ahead of verification (SpecActor §: decoupled drafting): the engine uses a draft
later, as long as the tokens it committed meanwhile followed it (`ahead_window`).

Messages are plain Python objects (frozen dataclasses, tuples of ints): no tensors cross the pipe.
Batches that queued up while this process drafted are applied together and drafted once, so a slow
draft is never followed by drafts of contexts already outdated.
"""

from __future__ import annotations

import queue
import signal
from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

from specroll.drafting.ahead_window import AheadDraft
from specroll.drafting.protocol import Draft, Drafter, DraftQuery, RequestInfo

DEFAULT_WINDOW = 8  # draft tokens per chain: a forward commits at most max_draft + 1, so some are left


# ---- events: the engine's lifecycle calls, as data --------------------------------------------------


@dataclass(frozen=True)
class Begin:
    info: RequestInfo

    def apply(self, state: AheadState) -> None:
        state.begin(self.info)


@dataclass(frozen=True)
class Observe:
    request_id: int
    token_ids: tuple[int, ...]

    def apply(self, state: AheadState) -> None:
        state.observe(self.request_id, self.token_ids)


@dataclass(frozen=True)
class Finish:
    request_id: int

    def apply(self, state: AheadState) -> None:
        state.finish(self.request_id)


@dataclass(frozen=True)
class AdvanceStep:
    step: int

    def apply(self, state: AheadState) -> None:
        state.advance_step(self.step)


@dataclass(frozen=True)
class Settings:
    """A request's sampling settings, as its latest query gave them (sampling drafters match them)."""

    request_id: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    noise_key: int | None = None

    def apply(self, state: AheadState) -> None:
        state.set_settings(self)


Event = Union[Begin, Observe, Finish, AdvanceStep, Settings]


# ---- messages ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventBatch:
    """The events of the engine's process since its last batch; `index` counts batches from 0."""

    index: int
    events: tuple[Event, ...]


@dataclass(frozen=True)
class Ready:
    """The inner drafter is built: batches are drafted from now on."""


@dataclass(frozen=True)
class Drafted:
    """The drafts made once every batch up to `batch_index` was applied."""

    batch_index: int
    drafts: tuple[AheadDraft, ...]


@dataclass(frozen=True)
class Failed:
    """The inner drafter raised; the process ends after sending this."""

    cause: str


Reply = Union[Ready, Drafted, Failed]


# ---- the state this process owns -------------------------------------------------------------------


@dataclass
class _LiveRequest:
    info: RequestInfo
    context: list[int]  # prompt + observed tokens
    settings: Settings


@dataclass
class AheadState:
    """The inner drafter and each live request's context; `draft()` drafts the requests that grew."""

    drafter: Drafter
    window: int = DEFAULT_WINDOW
    _live: dict[int, _LiveRequest] = field(default_factory=dict)
    _grown: set[int] = field(default_factory=set)  # live requests whose context grew since the last draft

    def apply(self, events: Sequence[Event]) -> None:
        for event in events:
            event.apply(self)

    def begin(self, info: RequestInfo) -> None:
        self.drafter.begin(info)
        self._live[info.request_id] = _LiveRequest(
            info, list(info.prompt_token_ids), Settings(info.request_id)
        )
        self._grown.add(info.request_id)

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self.drafter.observe(request_id, token_ids)
        self._live[request_id].context.extend(token_ids)
        self._grown.add(request_id)

    def finish(self, request_id: int) -> None:
        self.drafter.finish(request_id)
        del self._live[request_id]
        self._grown.discard(request_id)

    def advance_step(self, step: int) -> None:
        self.drafter.advance_step(step)

    def set_settings(self, settings: Settings) -> None:
        if settings.request_id in self._live:
            self._live[settings.request_id].settings = settings

    def draft(self) -> list[AheadDraft]:
        """A chain of up to `window` tokens for each live request whose context grew (none empty)."""
        queries = [self._query(self._live[r]) for r in sorted(self._grown)]
        self._grown.clear()
        if not queries:
            return []
        drafts = self.drafter.propose(queries)
        lengths = {q.request_id: len(q.context) for q in queries}
        return [
            AheadDraft(d.request_id, lengths[d.request_id], _chain(d), d.source)
            for d in drafts
            if d.token_ids and d.request_id in lengths
        ]

    def _query(self, request: _LiveRequest) -> DraftQuery:
        info, s = request.info, request.settings
        return DraftQuery(
            info.request_id,
            info.group_id,
            request.context,
            len(info.prompt_token_ids),
            self.window,
            s.temperature,
            s.top_k,
            s.top_p,
            noise_key=s.noise_key,
        )


# ---- the process's body -----------------------------------------------------------------------------


def serve(make_drafter: Callable[[], Drafter], window: int, inbox, outbox) -> None:
    """Apply event batches and answer with drafts until a None arrives; on an error, send `Failed`.
    The outbox is flushed before the process ends: its feeder thread would otherwise lose the last
    messages (the `Failed` above all)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is the engine's: it closes this process
    try:
        state = AheadState(make_drafter(), window)
        outbox.put(Ready())
        while (batches := _next_batches(inbox)) is not None:
            for batch in batches:
                state.apply(batch.events)
            outbox.put(Drafted(batches[-1].index, tuple(state.draft())))
    except Exception as error:  # the engine's side warns with the cause and drafts nothing from then on
        outbox.put(Failed(f"{type(error).__name__}: {error}"))
    finally:
        outbox.close()
        outbox.join_thread()


def _next_batches(inbox) -> list[EventBatch] | None:
    """The next batch, waiting for it, and every batch queued behind it; None once told to stop."""
    batches = [inbox.get()]
    while True:
        try:
            batches.append(inbox.get_nowait())
        except queue.Empty:
            break
    if any(b is None for b in batches):
        return None
    return batches


def _chain(draft: Draft) -> tuple[int, ...]:
    """A chain's tokens; a tree's main chain."""
    return tuple(draft.token_ids[: draft.main_chain_length])
