"""The policy's view of a running batch (`BatchView`), built from plain counts. Imports no torch.

The one builder the engine (`engine.proposer`) and the simulator (`sim.engine_policy`) both call, so
that a policy given the same batch decides alike in either: each request's counts as the engine keeps
them (`RequestCounts`, which the engine's `Request` is), the engine's queue, the lengths it finished
recently and, per prompt, the lengths that prompt's requests reached (`PromptLengths`).

Token counting, once: `num_output_tokens` are the tokens a request emitted, `num_remaining` what it may
still emit before max_tokens, and `num_cached` the positions cached before the forward decided on,
the prompt and every output token but the newest (which that forward feeds: `Request`'s KV invariant).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from specroll.policies.base import BatchView, RequestView
from specroll.policies.prompt_lengths import PromptLengths


class RequestCounts(Protocol):
    """What the view reads of one running request (the engine's `Request` has each of these)."""

    @property
    def request_id(self) -> int: ...
    @property
    def group_id(self) -> int: ...
    @property
    def num_output_tokens(self) -> int: ...
    @property
    def num_remaining(self) -> int: ...
    @property
    def num_drafted(self) -> int: ...
    @property
    def num_accepted(self) -> int: ...
    @property
    def num_forwards(self) -> int: ...
    @property
    def num_cached(self) -> int: ...
    @property
    def prompt_key(self) -> Hashable: ...


@dataclass(frozen=True)
class RunningCounts:
    """A running request's counts where no `Request` holds them (the simulator's fluid copies)."""

    request_id: int
    group_id: int
    num_output_tokens: int
    num_remaining: int
    num_drafted: int
    num_accepted: int
    num_forwards: int
    num_cached: int
    prompt_key: Hashable


def num_cached_before_forward(num_prompt_tokens: int, num_output_tokens: int) -> int:
    """Positions a running request has cached before its next forward: its prompt and its output but
    the newest token, which that forward feeds (none before its prefill has emitted one)."""
    return num_prompt_tokens + max(num_output_tokens - 1, 0)


def build_batch_view(
    requests: Sequence[RequestCounts],
    max_draft: int,
    *,
    trees: bool,
    num_waiting: int | None,
    finished_lengths: Sequence[int],
    prompt_lengths: PromptLengths,
) -> BatchView:
    """The policy's view of `requests` (in batch order); a prompt's lengths are one tuple its requests
    share (`PromptLengths.sorted`)."""
    views = [
        RequestView(
            r.request_id,
            r.group_id,
            r.num_output_tokens,
            r.num_remaining,
            r.num_drafted,
            r.num_accepted,
            r.num_forwards,
            r.num_cached,
            prompt_lengths.sorted(r.prompt_key),
        )
        for r in requests
    ]
    return BatchView(
        views, max_draft, trees=trees, num_waiting=num_waiting, finished_lengths=finished_lengths
    )
