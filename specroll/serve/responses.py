"""The JSON each endpoint answers with, built from finished (or streaming) choices. Every choice
carries what replays it (`seed`, `sample_index`) and the weight version that drew its tokens."""

from __future__ import annotations

import time
from typing import Any, Callable

from specroll import __version__
from specroll.serve.choice import Choice
from specroll.serve.generate_call import GenerateCall


SYSTEM_FINGERPRINT = f"specroll-{__version__}"
VersionName = Callable[[int | None], str | None]  # `ServeState.version_name`
# OpenAI's chat message fields specroll never fills (no tools, audio or reasoning parser): null, as vLLM
UNUSED_MESSAGE_FIELDS = ("refusal", "annotations", "audio", "function_call", "reasoning")


def replay_fields(call: GenerateCall, c: Choice) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "seed": call.seed,
        "sample_index": c.sample_index,
        "group_id": c.group_id,
        "weight_version": c.weight_version,
    }
    if len(c.versions) > 1:  # the weights changed under it: from which token each version drew
        fields["weight_versions"] = version_spans(c)
    if c.error:
        fields["error"] = c.error
    return fields


def version_spans(c: Choice) -> list[dict[str, int]]:
    """vLLM's `weight_versions` items: each version and the output tokens [start, end) it drew."""
    ends = [t for t, _ in c.versions[1:]] + [len(c.token_ids)]
    return [{"version": v, "start": t, "end": end} for (t, v), end in zip(c.versions, ends)]


def _token_strings(codec, call: GenerateCall, token_ids: list[int]) -> list[str]:
    if call.tokens_as_ids:
        return [f"token_id:{t}" for t in token_ids]
    return [codec.token_text(t) for t in token_ids]


def usage(choices: list[Choice]) -> dict[str, int]:
    prompt = sum(
        len(p) for p in {(c.group_id, c.prompt_token_ids): c.prompt_token_ids for c in choices}.values()
    )
    completion = sum(len(c.token_ids) for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def full_usage(choices: list[Choice]) -> dict[str, Any]:
    """A whole response's usage, with OpenAI's breakdowns (null: none kept)."""
    return {**usage(choices), "prompt_tokens_details": None, "completion_tokens_details": None}


def finish_reason(c: Choice) -> str | None:
    return "abort" if c.finish_reason == "error" else c.finish_reason


# ----- /v1/completions


def completion_logprobs(
    codec, call: GenerateCall, token_ids: list[int], logprobs: list[float], offset: str, scores=None
):
    """vLLM's completions logprobs; `top_logprobs` holds the sampled token and, with `scores`
    (`scoring.PositionLogprobs` a token), the k most likely."""
    if not call.logprobs:
        return None
    tokens = _token_strings(codec, call, token_ids)
    offsets, at = [], len(offset)
    for t in tokens:
        offsets.append(at)
        at += len(t)
    tops = [{} for _ in tokens] if scores is None else [_alternatives(codec, call, row) for row in scores]
    return {
        "tokens": tokens,
        "token_logprobs": list(logprobs),
        "top_logprobs": [{**top, t: lp} for top, t, lp in zip(tops, tokens, logprobs)],
        "text_offset": offsets,
    }


def _alternatives(codec, call: GenerateCall, row) -> dict[str, float]:
    names = _token_strings(codec, call, list(row.top_ids))
    return dict(zip(names, row.top_logprobs))


def prompt_logprobs(codec, call: GenerateCall, c: Choice) -> list | None:
    """vLLM's `prompt_logprobs`: None for the first token, then each token's entry and the k most
    likely, by token id: {"logprob", "rank", "decoded_token"}; None when not asked for."""
    if call.prompt_logprobs is None:
        return None
    if c.prompt_scores is None:
        return [None] * len(c.prompt_token_ids)
    rows: list = [None]
    for row in c.prompt_scores:
        names = [codec.token_text(t) for t in [*row.top_ids, row.token_id]]  # text even with tokens as ids
        entry = {
            str(t): {"logprob": lp, "rank": rank, "decoded_token": name}
            for t, lp, rank, name in zip(row.top_ids, row.top_logprobs, range(1, len(row.top_ids) + 1), names)
        }
        entry[str(row.token_id)] = {"logprob": row.logprob, "rank": row.rank, "decoded_token": names[-1]}
        rows.append(entry)
    return rows


def completion(rid: str, model: str, call: GenerateCall, choices: list[Choice], codec) -> dict[str, Any]:
    rows = []
    for c in choices:
        row = {
            "index": c.index,
            "text": c.text,
            "logprobs": completion_logprobs(codec, call, c.token_ids, c.logprobs, "", c.output_scores),
            "finish_reason": finish_reason(c),
            "stop_reason": c.stop_reason,
            "token_ids": list(c.token_ids) if call.return_token_ids else None,
            "prompt_logprobs": prompt_logprobs(codec, call, c),
            "prompt_token_ids": list(c.prompt_token_ids) if call.return_token_ids else None,
            **replay_fields(call, c),
        }
        rows.append(row)
    return _envelope(rid, "text_completion", model, call, rows, choices)


def latest_version(choices: list[Choice]) -> int | None:
    versions = [c.weight_version for c in choices if c.weight_version is not None]
    return max(versions) if versions else None


def _envelope(rid, kind, model, call, rows, choices) -> dict[str, Any]:
    return {
        "id": rid,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": rows,
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": full_usage(choices),
        "seed": call.seed,
        "weight_version": latest_version(choices),
    }


# ----- /v1/chat/completions


def chat_logprobs(codec, call: GenerateCall, token_ids: list[int], logprobs: list[float], scores=None):
    """OpenAI's chat logprobs; `top_logprobs` lists the k most likely with `scores`, else nothing (as
    OpenAI and vLLM without `top_logprobs`)."""
    if not call.logprobs:
        return None
    tokens = _token_strings(codec, call, token_ids)
    if scores is None:
        tops = [{} for _ in tokens]
    else:
        tops = [_alternatives(codec, call, row) for row in scores]
    return {
        "content": [
            {
                "token": s,
                "logprob": lp,
                "bytes": list(s.encode()),
                "top_logprobs": [
                    {"token": a, "logprob": x, "bytes": list(a.encode())} for a, x in top.items()
                ],
            }
            for s, lp, top in zip(tokens, logprobs, tops)
        ]
    }


def chat(rid: str, model: str, call: GenerateCall, choices: list[Choice], codec) -> dict[str, Any]:
    rows = []
    for c in choices:
        row = {
            "index": c.index,
            "message": chat_message(c.text),
            "logprobs": chat_logprobs(codec, call, c.token_ids, c.logprobs, c.output_scores),
            "finish_reason": finish_reason(c),
            "stop_reason": c.stop_reason,
            "token_ids": list(c.token_ids) if call.return_token_ids else None,
            **replay_fields(call, c),
        }
        rows.append(row)
    body = _envelope(rid, "chat.completion", model, call, rows, choices)
    # vLLM's chat gives the prompt's once, beside the choices
    body["prompt_logprobs"] = prompt_logprobs(codec, call, choices[0])
    body.update(chat_prompt_fields(call, choices[0]))
    return body


def chat_message(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **dict.fromkeys(UNUSED_MESSAGE_FIELDS)}


def chat_prompt_fields(call: GenerateCall, c: Choice) -> dict[str, Any]:
    """vLLM's chat `prompt_token_ids` (with `return_token_ids`) and `prompt_text` (never filled)."""
    return {
        "prompt_token_ids": list(c.prompt_token_ids) if call.return_token_ids else None,
        "prompt_text": None,
    }


# ----- SkyRL's /inference/v1/generate


def skyrl_generate(rid: str, model: str, call: GenerateCall, choices: list[Choice], codec) -> dict[str, Any]:
    """vLLM's /inference/v1/generate answer; tokens are named "token_id:N" (vLLM's `token`, which
    prime-rl's client checks) beside SkyRL's `token_id`."""
    rows = []
    for c in choices:
        rows.append(
            {
                "index": c.index,
                "token_ids": list(c.token_ids),
                "logprobs": _generate_logprobs(call, c) if call.logprobs else None,
                "finish_reason": finish_reason(c),
                "stop_reason": c.stop_reason,
                **replay_fields(call, c),
            }
        )
    return {
        "request_id": rid,
        "model": model,
        "created": int(time.time()),
        "usage": full_usage(choices),
        "prompt_logprobs": prompt_logprobs(codec, call, choices[0]),  # one prompt a request
        "prompt_token_ids": None,
        "choices": rows,
        "seed": call.seed,
        "weight_version": latest_version(choices),
    }


def _generate_logprobs(call: GenerateCall, c: Choice) -> dict[str, list]:
    """Each output token's entry; with `logprobs: k` (k > 1) also vLLM's `rank` and, under
    `top_logprobs`, the k most likely, ranked."""
    if c.output_scores is None:
        return {
            "content": [{**_id_entry(t, lp), "top_logprobs": []} for t, lp in zip(c.token_ids, c.logprobs)]
        }
    return {
        "content": [
            {**_id_entry(t, lp), "rank": row.rank, "top_logprobs": _id_alternatives(row)}
            for t, lp, row in zip(c.token_ids, c.logprobs, c.output_scores)
        ]
    }


def _id_entry(token_id: int, logprob: float) -> dict[str, Any]:
    return {"token": f"token_id:{token_id}", "token_id": token_id, "logprob": logprob}


def _id_alternatives(row) -> list[dict[str, Any]]:
    ranked = zip(row.top_ids, row.top_logprobs, range(1, len(row.top_ids) + 1))
    return [{**_id_entry(t, lp), "rank": rank} for t, lp, rank in ranked]


# ----- SGLang's /generate


def sglang_generate(rid: str, call: GenerateCall, choices: list[Choice], version_name: VersionName):
    """SGLang's answer: one object a choice (a list for several). `version_name` turns the server's
    version count into SGLang's `weight_version` string (the client's name for it where it gave one)."""
    if call.client_id is not None and len(choices) == 1:  # SGLang answers with the client's `rid`
        return _sglang_one(call.client_id, call, choices[0], version_name)
    rows = [_sglang_one(f"{call.client_id or rid}-{c.index}", call, c, version_name) for c in choices]
    return rows[0] if len(rows) == 1 else rows


def _sglang_one(rid: str, call: GenerateCall, c: Choice, version_name: VersionName) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": _sglang_finish(c),
        "prompt_tokens": len(c.prompt_token_ids),
        "completion_tokens": len(c.token_ids),
        "cached_tokens": 0,  # no prefix cache across requests
        "e2e_latency": time.monotonic() - c.started,
        **replay_fields(call, c),
        "weight_version": version_name(c.weight_version),
    }
    if call.logprobs:
        meta["output_token_logprobs"] = [[lp, t, None] for t, lp in zip(c.token_ids, c.logprobs)]
    return {"text": c.text, "output_ids": list(c.token_ids), "meta_info": meta}


def _sglang_finish(c: Choice) -> dict[str, Any]:
    """SGLang's finish_reason: `matched` names the stop string or token (EOS's id too), `length` the
    tokens drawn."""
    reason = finish_reason(c)
    if reason == "length":
        return {"type": "length", "length": len(c.token_ids)}
    if reason == "stop":
        return {"type": "stop", "matched": c.stop_reason if c.stop_reason is not None else c.token_ids[-1]}
    return {"type": reason}
