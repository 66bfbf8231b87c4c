"""The served model: turns a validated `GenerateCall` into engine requests, one a choice, and follows
them back (`Generation`). Owns the request ids, the tokenizer and the engine loop."""

from __future__ import annotations

import asyncio
import itertools
import math
from dataclasses import replace
from typing import Any

from specroll.engine.request import Request
from specroll.serve.choice import Choice
from specroll.serve.engine_loop import Emission, EngineLoop
from specroll.serve.keys import group_key, noise_key
from specroll.serve.prometheus import ServeMetrics
from specroll.serve.generate_call import GenerateCall
from specroll.serve.resumable import AbortedChoices, Resumable


class Codec:
    """The checkpoint's tokenizer as the protocol and the responses use it."""

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer.hf
        self.has_chat_template = tokenizer.has_chat_template

    def encode_text(self, text: str, add_special_tokens: bool) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def encode_chat(self, messages: list[dict], template_kwargs: dict) -> list[int]:
        from specroll.serve.errors import ApiError

        if not self.has_chat_template:
            raise ApiError("messages: this model has no chat template (use /v1/completions)", "messages")
        ids = self.hf.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False, **template_kwargs
        )
        return list(ids)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        return self.hf.decode([token_id], skip_special_tokens=False)


class Generation:
    """The choices of one HTTP request as they arrive; `changed` is set on every arrival."""

    def __init__(self, call: GenerateCall, choices: list[Choice]) -> None:
        self.call, self.choices = call, choices
        self.changed = asyncio.Event()

    @property
    def is_finished(self) -> bool:
        return all(c.is_finished for c in self.choices)

    async def wait(self) -> None:
        await self.changed.wait()
        self.changed.clear()


class Service:
    def __init__(self, codec: Codec, engine_loop: EngineLoop, metrics: ServeMetrics) -> None:
        self.codec, self.engine_loop, self.metrics = codec, engine_loop, metrics
        self._ids = itertools.count()
        self.aborted = AbortedChoices()

    def start(self, call: GenerateCall) -> Generation:
        call = self.aborted.resume(call)  # a client resending an aborted choice without saying so
        requests, choices = [], []
        for p, prompt in enumerate(call.prompts):
            for j in range(call.n):
                request = self._request(call, prompt, call.continue_from[p], call.sample_index + j)
                requests.append(request)
                choices.append(self._choice(call, len(choices), request, prompt))
        generation = Generation(call, choices)
        sinks = [self._sink(generation, c) for c in choices]
        self.metrics.num_requests_total += len(requests)
        self.engine_loop.submit(requests, sinks)
        return generation

    def abort(self, generation: Generation) -> None:
        """The client went away: its unfinished choices stop and free their slots."""
        ids = [c.request_id for c in generation.choices if not c.is_finished]
        if ids:
            self.engine_loop.abort(ids)

    def _remember(self, call: GenerateCall, choice: Choice) -> None:
        end = choice.num_prompt_tokens
        resumable = Resumable(end, call.seed, choice.sample_index)
        self.aborted.remember(
            choice.prompt_token_ids[:end], choice.prompt_token_ids[end:] + tuple(choice.token_ids), resumable
        )

    def _request(self, call: GenerateCall, prompt: tuple[int, ...], continue_from, sample: int) -> Request:
        """An engine request; a continuation's partial output is pre-filled, so its output positions
        (the noise's index) count from the original prompt's end."""
        end = len(prompt) if continue_from is None else continue_from
        partial = list(prompt[end:])
        return Request(
            request_id=next(self._ids),
            group_id=group_key(prompt[:end]),
            sample_index=sample,
            prompt_token_ids=tuple(prompt[:end]),
            params=replace(call.params, max_tokens=call.params.max_tokens + len(partial)),
            output_token_ids=partial,
            output_logprobs=[math.nan] * len(partial),
            noise_key=noise_key(call.seed, sample),
        )

    def _choice(self, call: GenerateCall, index: int, request: Request, prompt: tuple[int, ...]) -> Choice:
        skip = call.skip_special_tokens
        return Choice(
            num_prompt_tokens=len(request.prompt_token_ids),
            index=index,
            request_id=request.request_id,
            sample_index=request.sample_index,
            group_id=request.group_id,
            prompt_token_ids=prompt,
            decode=lambda ids: self.codec.decode(ids, skip),
            stop=call.stop,
            include_stop_str=call.include_stop_str,
        )

    def _sink(self, generation: Generation, choice: Choice):
        def receive(emission: Emission) -> None:
            if choice.extend(emission.token_ids, emission.logprobs, emission.weight_version):
                self.engine_loop.abort([choice.request_id])  # a stop string ended it here
                self.metrics.finished("stop")
            elif emission.finish_reason is not None and not choice.is_finished:
                choice.finish(emission.finish_reason, emission.error)
                choice.stop_reason = _stop_token(generation.call, choice)
                self.metrics.finished(emission.finish_reason)
                if emission.finish_reason == "abort":
                    self._remember(generation.call, choice)
            generation.changed.set()

        return receive


def _stop_token(call: GenerateCall, choice: Choice) -> int | None:
    """The stop token id that ended a choice (vLLM's `stop_reason`); None for EOS, length or abort."""
    last = choice.token_ids[-1] if choice.token_ids else None
    if choice.finish_reason == "stop" and last in call.params.stop_token_ids:
        return last
    return None
