"""verl's `generate` call as the /inference/v1/generate body specroll serves, and the answer as the
fields of verl's `TokenOutput`. Imports neither verl nor torch.

verl 0.9.1's agent loop (`LLMServerClient.generate`) calls its rollout server's
`generate(prompt_ids, sampling_params, request_id, image_data=None, ...)`. `sampling_params` are vLLM's
`SamplingParams` keywords as the agent loop builds them (`temperature`, `top_p`, `top_k`,
`repetition_penalty` 1.0, and `logprobs` as a bool, `rollout.calculate_log_probs`), plus what a recipe
adds (`max_tokens`, or SGLang's `max_new_tokens`; `seed`). They are read as verl's vLLM server reads
them (`vLLMHttpServer.generate`):
- `max_tokens`: as given, else min(response_length, prompt_length + response_length - the prompt's
  length); then clamped to [1, the positions left in max_model_len];
- `logprobs` True: each output token's log-probability (vLLM's `logprobs=0`); False: none.
Fields specroll does not implement (`repetition_penalty` != 1, ...) are refused by name by the same
parser as over HTTP.

The seed: specroll draws every choice from noise keyed by (seed, sample index) (docs/serve.md, the
exactness contract). A call's `seed` is used as given. Without one, under `rollout.full_determinism`
(where verl passes its callers' request ids through, as its vLLM server then seeds every request) the
seed is a digest of the request id, so an id names its draw; otherwise the server draws one, and a call
that resends an aborted request's prompt and partial tokens unseeded (verl's partial rollout,
`FullyAsyncLLMServerClient`) continues it under the seed that drew it, as an uninterrupted run would.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

SEED_BITS = 53  # a seed a JSON client reads back exactly (a double's mantissa)


@dataclass(frozen=True)
class RolloutLengths:
    """verl's rollout lengths (`actor_rollout_ref.rollout`): the defaults a call's budget comes from."""

    prompt_length: int
    response_length: int
    max_model_len: int  # prompt + output positions of one request

    def __post_init__(self) -> None:
        if min(self.prompt_length, self.response_length, self.max_model_len) <= 0:
            raise ValueError(f"rollout lengths must be positive, got {self}")


def request_seed(request_id: str) -> int:
    """The seed of a request that gave none: a 53-bit digest of its id."""
    digest = hashlib.blake2b(f"specroll-verl:{request_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def max_tokens(sampling_params: dict, num_prompt_tokens: int, lengths: RolloutLengths) -> int:
    """The call's output budget as verl's vLLM server sets it (pops `max_tokens`/`max_new_tokens`)."""
    room = lengths.max_model_len - num_prompt_tokens
    if room < 1:
        raise ValueError(
            f"a prompt of {num_prompt_tokens} tokens leaves no room in max_model_len {lengths.max_model_len}"
        )
    asked = sampling_params.pop("max_tokens", None)
    if asked is None:
        asked = sampling_params.pop("max_new_tokens", None)
    if asked is None:
        total = lengths.prompt_length + lengths.response_length
        asked = min(lengths.response_length, total - num_prompt_tokens)
    return max(1, min(asked, room))


def generate_body(
    prompt_ids: list[int],
    sampling_params: dict[str, Any],
    request_id: str,
    lengths: RolloutLengths,
    seed_from_id: bool = False,
) -> dict[str, Any]:
    """The /inference/v1/generate body of one verl call (`sampling_params` is left as given);
    `seed_from_id`: verl's `rollout.full_determinism`."""
    params = dict(sampling_params)
    budget = max_tokens(params, len(prompt_ids), lengths)
    if params.pop("logprobs", False):
        params["logprobs"] = 0  # the sampled token's log-probability, as verl's vLLM server asks
    if seed_from_id:
        params.setdefault("seed", request_seed(request_id))
    params["max_tokens"] = budget
    return {"token_ids": list(prompt_ids), "sampling_params": params, "request_id": request_id}


def check_text_only(**media: Any) -> None:
    """Refuse images, video and audio by name: the engine reads token ids alone."""
    given = sorted(name for name, value in media.items() if value)
    if given:
        raise ValueError(f"{', '.join(given)}: specroll serves text models only (token ids in and out)")


def stop_reason(finish_reason: str | None) -> str | None:
    """verl's `TokenOutput.stop_reason` for a choice's finish reason (vLLM's server's mapping)."""
    if finish_reason == "abort":
        return "aborted"
    if finish_reason in ("stop", "length"):
        return "completed"
    return finish_reason
