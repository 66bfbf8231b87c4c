"""A request (one sampled response) and its sampling parameters. Imports no torch."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property

from specroll.policies.prompt_lengths import prompt_key


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. temperature 0 is greedy; top_k 0 and top_p 1 switch those filters off."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Request:
    """One sampled response and everything the engine knows about it.

    KV invariant while running: the cache holds prompt + output except the newest output token,
    which is fed in the next forward (`num_cached` counts cached positions). A waiting request
    (new or preempted) holds no cache; resuming it recomputes prompt + output, so nothing is lost.

    Every field has one writer:

    | field                                   | writer                                                |
    |-----------------------------------------|-------------------------------------------------------|
    | request_id, group_id, sample_index,     | the constructor; never written after                  |
    | prompt_token_ids, params, noise_key     |                                                       |
    | output_token_ids, output_logprobs       | the constructor (a request resumed from tokens made   |
    |                                         | elsewhere), then `commit` only                        |
    | finish_reason, error                    | `commit` (stop, length) or `fail` (refused) only      |
    | status, slot, num_preemptions           | the `Scheduler`                                       |
    | num_cached                              | the `Scheduler`: zeroed on admission and release,     |
    |                                         | grown only by `confirm` after a forward completed     |
    | num_drafted, num_accepted, num_forwards | `Engine._commit` (one verification forward)           |

    Results leave as `output()`, a copy: no one hands results on by writing into a request (the
    coordinator of several workers keeps its own record, `cluster.coordinator.RequestState`).
    """

    request_id: int
    group_id: int
    sample_index: int
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    output_token_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    status: Status = Status.WAITING
    finish_reason: str | None = None  # stop | length | error
    error: str | None = None  # why the request was refused
    slot: int | None = None
    num_cached: int = 0
    num_preemptions: int = 0
    num_drafted: int = 0
    num_accepted: int = 0
    num_forwards: int = 0
    # what keys exact mode's noise with the engine's seed and the output position (`specroll.noise`):
    # the request id unless given, e.g. by a server that keys a choice by its seed and index
    noise_key: int | None = None

    def __post_init__(self) -> None:
        if self.noise_key is None:
            self.noise_key = self.request_id

    @cached_property
    def prompt_key(self) -> int:
        """The key its prompt's finished lengths are filed under (`prompt_lengths.prompt_key`): the
        requests of one prompt share it, in this step and the next; computed once, read every forward."""
        return prompt_key(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_remaining(self) -> int:
        return self.params.max_tokens - len(self.output_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def context(self) -> list[int]:
        return [*self.prompt_token_ids, *self.output_token_ids]

    def pending_tokens(self) -> list[int]:
        """Tokens not yet in the cache: the whole context when (re)starting, else the newest token.
        (On the decode path this slices the output only, not a copy of the whole context.)"""
        num_prompt = len(self.prompt_token_ids)
        if self.num_cached >= num_prompt:
            return self.output_token_ids[self.num_cached - num_prompt :]
        return self.context()[self.num_cached :]

    def commit(self, token_ids: list[int], logprobs: list[float], eos_token_ids: frozenset[int]) -> list[int]:
        """Append emitted tokens up to a stop token or max_tokens; returns the tokens kept. The one
        place that decides how a generated request ends."""
        kept: list[int] = []
        for token, logprob in zip(token_ids, logprobs):
            if self.num_remaining <= 0:
                break
            self.output_token_ids.append(token)
            self.output_logprobs.append(logprob)
            kept.append(token)
            if token in eos_token_ids or token in self.params.stop_token_ids:
                self.finish_reason = "stop"
                break
        if self.finish_reason is None and self.num_remaining <= 0:
            self.finish_reason = "length"
        return kept

    def can_run_ahead(self) -> bool:
        """Whether this request, in a decode step launched and not yet verified, may also be in the step
        launched ahead of that verification (`Engine._launch_ahead`): only if the step in flight cannot
        end it by length. That step emits one token (steps overlap only without a drafter), so it must
        leave room for one more: num_output_tokens + 2 <= max_tokens. Were the step in flight to reach
        max_tokens, the step ahead would compute a token `commit` may not keep. A stop token may still
        end it there; its row ahead is then computed and skipped (`Engine._decode`), one wasted row.

        The counts read here, like all the step ahead is drafted from, are one step behind: the step
        ahead is drafted, its draft lengths decided by the policy, before the step in flight is
        verified, committed and observed. So the token in flight is not yet counted in
        `num_output_tokens`, and the policy decides step N+1 before it is told what step N did."""
        return self.num_output_tokens + 2 <= self.params.max_tokens

    def fail(self, error: str) -> None:
        """The request was refused (bad input): it ends with this error and generates nothing more."""
        self.finish_reason, self.error = "error", error

    def output(self) -> RequestOutput:
        return RequestOutput(
            self.request_id,
            self.group_id,
            self.sample_index,
            list(self.output_token_ids),
            list(self.output_logprobs),
            self.finish_reason,
            self.error,
            self.num_preemptions,
        )


@dataclass(frozen=True)
class RequestOutput:
    """A request's result as handed out: a copy, whoever ran it (one engine, or the coordinator of
    several workers)."""

    request_id: int
    group_id: int
    sample_index: int
    token_ids: list[int]
    logprobs: list[float]  # of each token under the policy (`sampling.policy_logprobs`: untruncated)
    finish_reason: str | None  # stop | length | error
    error: str | None = None  # why it was refused, or lost
    num_preemptions: int = 0

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids)


def check_prompt(request: Request, vocab_size: int) -> None:
    """Raise ValueError naming what is wrong with the request's prompt: empty, or a token outside the
    vocabulary."""
    prompt = request.prompt_token_ids
    if not prompt:
        raise ValueError(f"request {request.request_id}: empty prompt")
    bad = [t for t in prompt if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(
            f"request {request.request_id}: token ids {bad[:5]} outside the vocabulary 0..{vocab_size - 1}"
        )
