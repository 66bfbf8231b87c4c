"""The baseline an RL engineer would otherwise use: Hugging Face `transformers` `generate`.

Requests are taken in order in static batches of `batch_size` (left-padded prompts, sampling with
the same temperature/top-k/top-p and stop token); a batch ends when its longest response ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from specroll.model.device import torch_dtype


@dataclass(frozen=True)
class GenerateRun:
    makespan_seconds: float
    output_tokens: int
    outputs: list[list[int]]


def hf_generate(
    model_dir: Path,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    batch_size: int,
    seed: int,
    device: str = "cpu",
    dtype: str = "float32",
) -> GenerateRun:
    from transformers import AutoModelForCausalLM

    model = (
        AutoModelForCausalLM.from_pretrained(str(model_dir), local_files_only=True, dtype=torch_dtype(dtype))
        .to(device)
        .eval()
    )
    eos = model.generation_config.eos_token_id
    eos_ids = {eos} if isinstance(eos, int) else set(eos or [])
    pad = next(iter(eos_ids), 0)
    torch.manual_seed(seed)
    start = time.perf_counter()
    outputs: list[list[int]] = []
    for i in range(0, len(prompts), batch_size):
        outputs += _generate_batch(
            model, prompts[i : i + batch_size], max_tokens, temperature, top_k, top_p, pad, eos_ids
        )
    makespan = time.perf_counter() - start
    return GenerateRun(makespan, sum(map(len, outputs)), outputs)


def _generate_batch(model, prompts, max_tokens, temperature, top_k, top_p, pad, eos_ids) -> list[list[int]]:
    width = max(map(len, prompts))
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long, device="cpu")
    mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):  # left padding
        input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), device="cpu")
        mask[row, width - len(prompt) :] = 1
    input_ids, mask = input_ids.to(model.device), mask.to(model.device)
    sampling = (
        dict(do_sample=True, temperature=temperature, top_k=top_k or None, top_p=top_p)
        if temperature > 0
        else dict(do_sample=False)
    )
    with torch.inference_mode():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            max_new_tokens=max_tokens,
            eos_token_id=sorted(eos_ids) or None,
            pad_token_id=pad,
            **sampling,
        )
    return [_until_stop(row[width:].tolist(), eos_ids) for row in out]


def _until_stop(tokens: list[int], eos_ids: set[int]) -> list[int]:
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1]
    return tokens
