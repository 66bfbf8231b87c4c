"""verl's rollout settings (`actor_rollout_ref.rollout`, its `RolloutConfig`) as `specroll serve`'s
flags, the one way specroll turns settings into a served engine. Imports neither verl nor torch.

Read from verl: `max_model_len` (else prompt_length + response_length), `seed` (the engine's),
`dtype`. Everything else comes from `engine_kwargs.specroll`, a mapping of `specroll serve` flags by
name (`speculate: on`, `max_batch_size: 16`, `device: cuda`, `fast_numerics: true`, ...), as verl's
vLLM and SGLang backends read `engine_kwargs.vllm` and `engine_kwargs.sglang`. verl's `max_num_seqs`
(1024 by default) is not taken as the batch: a KV cache of 1024 slots would not fit a CPU; the server
sizes its slots from the free memory unless `max_batch_size` or `kv_memory` is given.
"""

from __future__ import annotations

from typing import Any, Mapping

from specroll.integrations.verl_requests import RolloutLengths

ENGINE_KWARGS_KEY = "specroll"  # engine_kwargs.specroll, beside verl's engine_kwargs.vllm and .sglang
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
          "float32": "float32", "fp32": "float32", "auto": "auto"}  # fmt: skip


def rollout_lengths(rollout: Any) -> RolloutLengths:
    total = rollout.prompt_length + rollout.response_length
    return RolloutLengths(rollout.prompt_length, rollout.response_length, rollout.max_model_len or total)


def engine_kwargs(rollout: Any) -> dict[str, Any]:
    """`engine_kwargs.specroll` as a plain dict (empty where not given)."""
    given = (rollout.engine_kwargs or {}).get(ENGINE_KWARGS_KEY) or {}
    return dict(given.items())


def serve_flags(rollout: Any, model_dir: str) -> list[str]:
    """`specroll serve`'s arguments (without `serve`) for a rollout server of `rollout`'s settings."""
    lengths = rollout_lengths(rollout)
    if rollout.dtype not in DTYPES:
        raise ValueError(f"rollout.dtype: {rollout.dtype!r} is not one of {', '.join(DTYPES)}")
    values: dict[str, Any] = {
        "model": model_dir,
        "max_model_len": lengths.max_model_len,
        "max_tokens": lengths.max_model_len - 1,  # each call's own budget is set per call
        "seed": rollout.seed,
        "dtype": DTYPES[rollout.dtype],
    }
    return as_flags(values | engine_kwargs(rollout))


def as_flags(values: Mapping[str, Any]) -> list[str]:
    """{name: value} as command-line flags: `--max-batch-size 16`; True as a bare flag, False left out."""
    flags: list[str] = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False and value is not None:
            flags += [flag, str(value)]
    return flags


def wants_gpu(rollout: Any) -> bool:
    """Whether the server's Ray actor must hold a GPU: the engine was asked to run on CUDA."""
    return str(engine_kwargs(rollout).get("device", "cpu")).startswith("cuda")
