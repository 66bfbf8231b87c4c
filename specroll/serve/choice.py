"""One served choice as the HTTP side sees it: the tokens it has received, its text, and how it ended.
Stop strings are applied here (the engine knows token ids only). Imports no torch."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

Decode = Callable[[list[int]], str]


@dataclass
class Choice:
    """Choice `index` of a response: sample `sample_index` of `seed` for `prompt_token_ids`.

    `versions` lists (first token, weight version) wherever the weights that drew its tokens changed."""

    index: int
    request_id: int
    sample_index: int
    group_id: int
    prompt_token_ids: tuple[int, ...]  # as sent (a continuation's: the original prompt + partial output)
    decode: Decode
    num_prompt_tokens: int = 0  # where the original prompt ends in prompt_token_ids
    stop: tuple[str, ...] = ()
    include_stop_str: bool = False
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[tuple[int, int]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None  # the stop string, or stop token id, that ended it (vLLM's)
    error: str | None = None
    # with top_logprobs / prompt_logprobs asked: `scoring.PositionLogprobs` of each output / prompt token
    output_scores: list | None = None
    prompt_scores: list | None = None
    started: float = field(default_factory=time.monotonic)  # for SGLang's e2e_latency
    _text: str | None = None

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def weight_version(self) -> int | None:
        """The weight version of its newest token (of its start, before any token)."""
        return self.versions[-1][1] if self.versions else None

    def extend(self, token_ids: list[int], logprobs: list[float], version: int) -> bool:
        """Take the tokens of one forward; True when a stop string ended the choice here."""
        if self.is_finished:
            return False
        if not self.versions or self.versions[-1][1] != version:
            self.versions.append((len(self.token_ids), version))
        before = len(self.token_ids)
        self.token_ids += token_ids
        self.logprobs += logprobs
        self._text = None
        return bool(self.stop) and self._apply_stop(before)

    def finish(self, reason: str, error: str | None = None) -> None:
        if not self.is_finished:
            self.finish_reason, self.error = reason, error

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = self.decode(self.token_ids)
        return self._text

    def _apply_stop(self, before: int) -> bool:
        """Cut at the first stop string in the text: the tokens up to the one completing it, the text
        up to the string (through it with include_stop_str)."""
        text = self.text
        start = max(0, len(self.decode(self.token_ids[:before])) - max(map(len, self.stop)))
        found = [(text.find(s, start), s) for s in self.stop if text.find(s, start) >= 0]
        if not found:
            return False
        at, stop = min(found)
        end = at + len(stop)
        keep = next(
            k
            for k in range(before + 1, len(self.token_ids) + 1)
            if len(self.decode(self.token_ids[:k])) >= end
        )
        del self.token_ids[keep:], self.logprobs[keep:]
        self.versions = [v for v in self.versions if v[0] < keep] or self.versions[:1]
        self._text = text[: end if self.include_stop_str else at]
        self.finish_reason, self.stop_reason = "stop", stop
        return True
