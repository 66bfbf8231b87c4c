"""Reading a JSON object's fields by name and type, refusing what is left unread: a field a client
sends is either understood or refused by name, never silently ignored."""

from __future__ import annotations

import math
from typing import Any

from specroll.serve.errors import ApiError

# sampling fields specroll does not implement, accepted only at the value that switches them off
NEUTRAL = {
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "repetition_penalty": 1,
    "length_penalty": 1,
    "min_p": 0,
    "min_tokens": 1,  # an output always holds at least one token (a stop token is kept), so 1 is off
    "min_new_tokens": 0,
    "logit_bias": None,
    "best_of": None,
    "echo": False,
    "suffix": None,
    "ignore_eos": False,
    "use_beam_search": False,
    "logprob_start_len": -1,
    "top_logprobs_num": 0,
    "truncate_prompt_tokens": None,
    "bad_words": None,
    "allowed_token_ids": None,
    "guided_json": None,
    "guided_regex": None,
    "guided_choice": None,
    "guided_grammar": None,
    "structured_outputs": None,
    "response_format": None,
    "tools": None,
    "tool_choice": None,
    "parallel_tool_calls": None,
    "lora_request": None,
    "lora_path": None,
    "return_text_in_logprobs": False,
    "return_hidden_states": False,
    "priority": 0,  # one queue, first come first served
}
# fields that say nothing about sampling: read and dropped
IGNORED = (
    "user",
    "session_id",
    "metadata",
    "spaces_between_special_tokens",
    "detokenize",
    "output_kind",
    "store",
    "service_tier",
    "cache_salt",  # there is no prefix cache to namespace
    "custom_params",
    "features",
)


def _is_neutral(name: str, value: Any) -> bool:
    neutral = NEUTRAL[name]
    if value is None or value == neutral:
        return True
    if name == "min_tokens":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1
    if name == "best_of":
        return False
    return isinstance(value, (dict, list)) and not value


class Fields:
    """The fields of one JSON object (`where` names it in errors, e.g. "sampling_params.")."""

    def __init__(self, body: Any, where: str = "") -> None:
        if not isinstance(body, dict):
            raise ApiError(
                f"{where.rstrip('.') or 'the body'} must be a JSON object", where.rstrip(".") or None
            )
        self.values, self.where = dict(body), where

    def has(self, name: str) -> bool:
        return self.values.get(name) is not None

    def raw(self, name: str) -> Any:
        return self.values.pop(name, None)

    def param(self, name: str) -> str:
        return self.where + name

    def fail(self, name: str, message: str) -> ApiError:
        return ApiError(f"{self.param(name)}: {message}", self.param(name))

    def int(self, name: str, default: int | None = None, low: int | None = None, high: int | None = None):
        value = self.values.pop(name, None)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"must be an integer, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise self.fail(name, f"must be in [{low}, {high}], got {value}")
        return value

    def float(self, name: str, default: float) -> float:
        value = self.values.pop(name, None)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(name, f"must be a finite number, got {value!r}")
        return float(value)

    def bool(self, name: str, default: bool = False) -> bool:
        return self._of_type(name, bool, default, "true or false")

    def str(self, name: str, default: str | None = None) -> str | None:
        return self._of_type(name, str, default, "a string")

    def _of_type(self, name: str, kind: type, default, what: str):
        value = self.values.pop(name, None)
        if value is None:
            return default
        if not isinstance(value, kind):
            raise self.fail(name, f"must be {what}, got {value!r}")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        """A string or a list of strings (e.g. `stop`)."""
        value = self.values.pop(name, None)
        if value is None:
            return ()
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
            raise self.fail(name, "must be a non-empty string or a list of non-empty strings")
        return tuple(items)

    def ints(self, name: str) -> tuple[int, ...]:
        value = self.values.pop(name, None)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(_is_int(t) for t in value):
            raise self.fail(name, "must be a list of integers")
        return tuple(value)

    def finish(self) -> None:
        """Refuse every field left unread (a neutral value of an unimplemented one passes)."""
        for name in list(self.values):
            value = self.values.pop(name)
            if name in IGNORED or (name in NEUTRAL and _is_neutral(name, value)):
                continue
            if name in NEUTRAL:
                raise self.fail(name, f"is not supported by specroll serve (only {NEUTRAL[name]!r}, off)")
            raise self.fail(name, "is not a field specroll serve understands")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
