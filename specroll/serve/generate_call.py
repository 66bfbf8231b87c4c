"""The generation requests the server understands, parsed into one validated value (`GenerateCall`):
OpenAI's /v1/completions and /v1/chat/completions (with vLLM's extensions), SkyRL's
/inference/v1/generate and SGLang's /generate. Imports no torch.

Continuing a choice: send the original prompt's tokens followed by the choice's partial output as the
prompt, `continue_from` = the original prompt's length, the response's `seed` and the choice's
`sample_index`; the output positions then count from the original prompt's end, so the continued
tokens are those an uninterrupted run draws (`specroll.serve.keys`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from specroll.engine.request import SamplingParams
from specroll.serve.errors import ApiError
from specroll.serve.fields import Fields
from specroll.serve.keys import draw_seed

MAX_STOP_STRINGS = 16
MAX_CLIENT_ID = 256
MAX_TOP_LOGPROBS = 20  # vLLM's default cap on `logprobs` and `prompt_logprobs`
SEED_RANGE = (-(1 << 63), (1 << 64) - 1)


class TextCodec(Protocol):
    """The tokenizer as the protocol needs it."""

    def encode_text(self, text: str, add_special_tokens: bool) -> list[int]: ...

    def encode_chat(self, messages: list[dict], template_kwargs: dict) -> list[int]: ...


@dataclass(frozen=True)
class Limits:
    """What this server accepts."""

    vocab_size: int
    max_model_len: int  # prompt + output positions of one choice
    max_tokens: int  # the most new tokens one choice may ask for
    max_n: int  # the most choices one prompt may ask for
    model_names: frozenset[str]  # the names `model` may give (absent: any)
    served_name: str = ""  # the name errors show (never the checkpoint's path on this machine)


@dataclass(frozen=True)
class GenerateCall:
    """One generation request, validated. Each prompt gets `n` choices; choice j of a prompt draws as
    sample `sample_index + j` of `seed`."""

    prompts: tuple[tuple[int, ...], ...]  # each prompt's tokens (a continuation's: prompt + partial output)
    continue_from: tuple[int | None, ...]  # per prompt: where its original prompt ends; None: at its end
    params: SamplingParams  # max_tokens: the new tokens each choice may add
    n: int = 1
    seed: int = 0
    is_seeded: bool = True  # False: the server drew `seed`
    sample_index: int = 0
    logprobs: bool = False
    stop: tuple[str, ...] = ()
    include_stop_str: bool = False
    stream: bool = False
    return_token_ids: bool = False
    tokens_as_ids: bool = False
    skip_special_tokens: bool = True
    model: str | None = None
    top_logprobs: int = 0  # alternatives reported a sampled token (vLLM's `logprobs: k`)
    prompt_logprobs: int | None = None  # vLLM's: each prompt token's log-probability, and k alternatives
    client_id: str | None = None  # the client's own id (vLLM's `request_id`, SGLang's `rid`): aborts by it
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage


# ----- the endpoints


def parse_completion(body: Any, limits: Limits, codec: TextCodec) -> GenerateCall:
    fields = Fields(body)
    model = _model(fields, limits)
    if not fields.has("prompt"):
        raise ApiError("prompt: missing", "prompt")
    add_special = fields.bool("add_special_tokens", True)
    prompts = _prompts(fields.raw("prompt"), "prompt", limits, codec, add_special)
    logprobs = fields.int("logprobs", None, 0, MAX_TOP_LOGPROBS)
    call = _sampled(fields, prompts, limits, model=model, logprobs=logprobs is not None, default_tokens=16)
    return _with_top_logprobs(call, logprobs or 0, "logprobs")


def parse_chat(body: Any, limits: Limits, codec: TextCodec) -> GenerateCall:
    fields = Fields(body)
    model = _model(fields, limits)
    messages = fields.raw("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError("messages: must be a non-empty list of message objects", "messages")
    template_kwargs = fields.raw("chat_template_kwargs") or {}
    if not isinstance(template_kwargs, dict):
        raise ApiError("chat_template_kwargs: must be an object", "chat_template_kwargs")
    fields.raw("add_generation_prompt")  # always: the assistant answers
    try:
        prompt = tuple(codec.encode_chat(messages, template_kwargs))
    except ApiError:
        raise
    except Exception as err:  # a template that cannot render these messages
        raise ApiError(f"messages: cannot apply the chat template ({err})", "messages") from None
    _check_tokens(prompt, "messages", limits)
    logprobs = fields.bool("logprobs")
    top = fields.int("top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if top and not logprobs:
        raise ApiError("top_logprobs: needs logprobs: true", "top_logprobs")
    if fields.has("max_completion_tokens"):
        fields.values.setdefault("max_tokens", fields.raw("max_completion_tokens"))
    call = _sampled(fields, (prompt,), limits, model=model, logprobs=logprobs, default_tokens=None)
    return _with_top_logprobs(call, top or 0, "top_logprobs")


def parse_skyrl_generate(body: Any, limits: Limits) -> GenerateCall:
    """SkyRL's (vLLM's) token-in, token-out /inference/v1/generate: `token_ids` and `sampling_params`."""
    fields = Fields(body)
    model = _model(fields, limits)
    if not fields.has("token_ids"):
        raise ApiError("token_ids: missing", "token_ids")
    prompts = _prompts(fields.raw("token_ids"), "token_ids", limits, None, False, single=True)
    sampling = Fields(fields.raw("sampling_params") or {}, "sampling_params.")
    for name in ("continue_from", "sample_index", "stream", "request_id"):
        if fields.has(name):
            sampling.values[name] = fields.raw(name)
    fields.finish()
    logprobs = sampling.int("logprobs", None, 0, MAX_TOP_LOGPROBS)
    sampling.bool("flat_logprobs")  # vLLM's in-memory layout of the same numbers: the JSON is alike
    call = _sampled(
        sampling, prompts, limits, model=model, logprobs=logprobs is not None, default_tokens=None
    )
    # 0 and 1: the sampled token's log-probability alone, what prime-rl and SkyRL read, with no second
    # forward; 2..20 add the k most likely (a scoring forward, as /v1/completions' `logprobs: k`)
    top = logprobs if logprobs is not None and logprobs > 1 else 0
    return _with_top_logprobs(call, top, "sampling_params.logprobs")


def parse_sglang_generate(body: Any, limits: Limits, codec: TextCodec) -> GenerateCall:
    """SGLang's /generate: `input_ids` (or `text`), `sampling_params` under SGLang's names,
    `return_logprob`."""
    fields = Fields(body)
    model = _model(fields, limits)
    if fields.has("input_ids"):
        prompts = _prompts(fields.raw("input_ids"), "input_ids", limits, None, False)
    elif fields.has("text"):
        prompts = _prompts(fields.raw("text"), "text", limits, codec, False)
    else:
        raise ApiError("input_ids: missing (give input_ids or text)", "input_ids")
    logprobs = fields.bool("return_logprob")
    if fields.bool("stream"):
        raise ApiError("stream: streaming is not supported on /generate (use /v1/completions)", "stream")
    sampling = Fields(fields.raw("sampling_params") or {}, "sampling_params.")
    for name in ("continue_from", "sample_index"):
        if fields.has(name):
            sampling.values[name] = fields.raw(name)
    if fields.has("rid"):
        sampling.values["request_id"] = fields.raw("rid")
    fields.finish()
    renames = {"max_new_tokens": "max_tokens", "sampling_seed": "seed"}
    for sglang, vllm in renames.items():
        if sampling.has(sglang):
            sampling.values[vllm] = sampling.raw(sglang)
    _refuse_scores(sampling, "/generate")
    _check_custom_params(sampling)
    if sampling.has("no_stop_trim"):
        sampling.values["include_stop_str_in_output"] = sampling.raw("no_stop_trim")
    return _sampled(sampling, prompts, limits, model=model, logprobs=logprobs, default_tokens=128)


# ----- shared parts


def _model(fields: Fields, limits: Limits) -> str | None:
    model = fields.str("model")
    if model is not None and model not in limits.model_names:
        served = limits.served_name or ", ".join(sorted(n for n in limits.model_names if "/" not in n))
        raise ApiError(f"model: {model!r} is not served here (served: {served})", "model", 404)
    return model


def _with_top_logprobs(call: GenerateCall, k: int, param: str) -> GenerateCall:
    if k and call.stream:
        raise ApiError(
            f"{param}: alternatives are not reported on a stream (0, or ask without stream)", param
        )
    return replace(call, top_logprobs=k)


def _check_custom_params(sampling: Fields) -> None:
    """SGLang hands `custom_params` to a custom logit processor; this server runs none, so they change
    nothing (as in SGLang without one), except slime's `return_top_p_token_ids`, which asks for an
    output: each step's top-p nucleus, which this server does not report."""
    custom = sampling.values.get("custom_params")
    if custom is None:
        return
    if not isinstance(custom, dict):
        raise sampling.fail("custom_params", f"must be an object, got {custom!r}")
    if custom.get("return_top_p_token_ids"):
        raise sampling.fail(
            "custom_params.return_top_p_token_ids",
            "the token ids top_p kept at each step are not reported by specroll serve (its "
            "log-probabilities are over the whole vocabulary at the temperature, not over the nucleus); "
            "sample with top_p 1.0, with which slime does not ask for them",
        )


def _refuse_scores(fields: Fields, endpoint: str) -> None:
    if fields.has("prompt_logprobs"):
        raise fields.fail("prompt_logprobs", f"not on {endpoint} (/v1/completions and chat take it)")


def _prompts(
    value: Any, param: str, limits: Limits, codec: TextCodec | None, add_special: bool, single: bool = False
) -> tuple[tuple[int, ...], ...]:
    """A prompt as text, token ids, or a list of either; returns each prompt's tokens."""
    if isinstance(value, str) or (isinstance(value, list) and value and _is_int(value[0])):
        items = [value]
    elif isinstance(value, list) and value and not single:
        items = value
    else:
        raise ApiError(f"{param}: must be a non-empty prompt (text or token ids)", param)
    prompts = tuple(_one_prompt(item, param, limits, codec, add_special) for item in items)
    return prompts


def _one_prompt(item: Any, param: str, limits: Limits, codec, add_special: bool) -> tuple[int, ...]:
    if isinstance(item, str):
        if not item or codec is None:
            raise ApiError(f"{param}: must be a non-empty prompt", param)
        tokens = tuple(codec.encode_text(item, add_special))
    elif isinstance(item, list) and all(_is_int(t) for t in item):
        tokens = tuple(item)
    else:
        raise ApiError(f"{param}: each prompt must be text or a list of token ids", param)
    _check_tokens(tokens, param, limits)
    return tokens


def _check_tokens(tokens: tuple[int, ...], param: str, limits: Limits) -> None:
    if not tokens:
        raise ApiError(f"{param}: the prompt is empty", param)
    bad = [t for t in tokens if not 0 <= t < limits.vocab_size]
    if bad:
        raise ApiError(
            f"{param}: token ids {bad[:5]} outside the vocabulary 0..{limits.vocab_size - 1}", param
        )
    if len(tokens) >= limits.max_model_len:
        raise ApiError(
            f"{param}: {len(tokens)} tokens leave no room in the context of {limits.max_model_len}", param
        )


def _sampled(
    fields: Fields,
    prompts: tuple[tuple[int, ...], ...],
    limits: Limits,
    *,
    model: str | None,
    logprobs: bool,
    default_tokens: int | None,
) -> GenerateCall:
    """The sampling fields (vLLM's names) shared by every endpoint, and the checks against limits."""
    n = fields.int("n", 1, 1, limits.max_n)
    continue_from = _continue_from(fields, prompts)
    max_tokens = _max_tokens(fields, prompts, limits, default_tokens)
    seed = fields.int("seed", None, *SEED_RANGE)
    top_k = fields.int("top_k", 0, -1)
    temperature, top_p = fields.float("temperature", 1.0), fields.float("top_p", 1.0)
    if temperature < 0:
        raise fields.fail("temperature", f"must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise fields.fail("top_p", f"must be in (0, 1], got {top_p}")
    stop_token_ids = fields.ints("stop_token_ids")
    if any(not 0 <= t < limits.vocab_size for t in stop_token_ids):
        raise fields.fail("stop_token_ids", f"ids must be in the vocabulary 0..{limits.vocab_size - 1}")
    prompt_logprobs = fields.int("prompt_logprobs", None, 0, MAX_TOP_LOGPROBS)
    stop = fields.strings("stop")
    if len(stop) > MAX_STOP_STRINGS:
        raise fields.fail("stop", f"at most {MAX_STOP_STRINGS} stop strings")
    call = GenerateCall(
        prompts=prompts,
        continue_from=continue_from,
        params=SamplingParams(max_tokens, temperature, _top_k(top_k, limits), top_p, stop_token_ids),
        n=n,
        seed=draw_seed() if seed is None else seed,
        is_seeded=seed is not None,
        sample_index=fields.int("sample_index", 0, 0, (1 << 62)),
        logprobs=logprobs,
        stop=stop,
        include_stop_str=fields.bool("include_stop_str_in_output"),
        stream=fields.bool("stream"),
        return_token_ids=fields.bool("return_token_ids"),
        tokens_as_ids=fields.bool("return_tokens_as_token_ids"),
        skip_special_tokens=fields.bool("skip_special_tokens", True),
        model=model,
        prompt_logprobs=prompt_logprobs,
        client_id=_client_id(fields),
        include_usage=_include_usage(fields),
    )
    fields.finish()
    if call.stream and prompt_logprobs is not None:
        raise fields.fail("prompt_logprobs", "not on a stream (ask without stream)")
    return call


def _client_id(fields: Fields) -> str | None:
    """vLLM's `request_id` (SGLang's `rid`): the response's id and a name /abort_requests takes."""
    value = fields.values.pop("request_id", None)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_CLIENT_ID:
        raise fields.fail("request_id", f"must be a non-empty string of at most {MAX_CLIENT_ID} characters")
    return value


def _include_usage(fields: Fields) -> bool:
    options = Fields(fields.raw("stream_options") or {}, fields.param("stream_options."))
    include = options.bool("include_usage")
    options.bool("continuous_usage_stats")  # usage on every chunk: the last one carries it
    options.finish()
    return include


def _top_k(top_k: int, limits: Limits) -> int:
    """-1 (vLLM's off), 0 and anything past the vocabulary all mean no top-k filter."""
    return 0 if top_k < 0 or top_k >= limits.vocab_size else top_k


def _continue_from(fields: Fields, prompts) -> tuple[int | None, ...]:
    value = fields.values.pop("continue_from", None)
    if value is None:
        return tuple(None for _ in prompts)
    values = value if isinstance(value, list) else [value]
    if len(values) != len(prompts) or not all(_is_int(v) for v in values):
        raise fields.fail("continue_from", "must be an integer per prompt (where its original prompt ends)")
    for v, prompt in zip(values, prompts):
        if not 0 < v <= len(prompt):
            raise fields.fail(
                "continue_from", f"must be in [1, {len(prompt)}] (the prompt's length), got {v}"
            )
    return tuple(values)


def _max_tokens(fields: Fields, prompts, limits: Limits, default: int | None) -> int:
    room = limits.max_model_len - max(map(len, prompts))
    asked = fields.int("max_tokens", None, 1, limits.max_tokens)
    if asked is None:
        return max(1, min(limits.max_tokens, room, default or limits.max_tokens))
    if asked > room:
        raise fields.fail(
            "max_tokens",
            f"{max(map(len, prompts))} prompt tokens + {asked} exceed the context of {limits.max_model_len}",
        )
    return asked


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
