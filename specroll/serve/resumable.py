"""Aborted choices the server can continue exactly when a client sends them back without saying so.

AReaL's remote engine resends an aborted request as prompt + partial output, with no field marking
where its prompt ended and no seed. The server remembers each aborted choice's full tokens (a digest),
its original prompt length, seed and sample index, and continues a matching unseeded request from there,
so the continued tokens are the uninterrupted run's. Pure Python."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specroll.serve.generate_call import GenerateCall

MAX_REMEMBERED = 4096  # aborted choices kept (least recently aborted dropped first)


@dataclass(frozen=True)
class Resumable:
    num_prompt_tokens: int
    seed: int
    sample_index: int


def _digest(token_ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(",".join(map(str, token_ids)).encode(), digest_size=16).digest()


class AbortedChoices:
    def __init__(self, capacity: int = MAX_REMEMBERED) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[bytes, Resumable] = OrderedDict()

    def remember(self, prompt: Sequence[int], output: Sequence[int], resumable: Resumable) -> None:
        key = _digest([*prompt, *output])
        self._entries[key] = resumable
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def resume(self, call: GenerateCall) -> GenerateCall:
        """`call` as the continuation of an aborted choice it matches; else `call` unchanged. Only a
        call that gave no seed, no `continue_from`, one prompt and one choice is matched."""
        if call.is_seeded or call.n != 1 or len(call.prompts) != 1 or call.continue_from[0] is not None:
            return call
        found = self._entries.get(_digest(call.prompts[0]))
        if found is None:
            return call
        return replace(
            call, continue_from=(found.num_prompt_tokens,), seed=found.seed, sample_index=found.sample_index
        )
