"""Runs workloads through one vLLM offline engine (`vllm.LLM`); executed by the vLLM peer environment's
Python (`make vllm-peer`), never imported by specroll, so it imports nothing of specroll.

Usage: python vllm_child.py, talking one JSON line a message: the first line on stdin holds the engine's
settings (model directory, speculative method, "" for none, batch size, longest request, seed, dtype)
and a warm-up generation, answered by the start-up seconds (building the engine and the warm-up); each
later line holds one generation (prompts as token ids, samples a prompt, sampling settings, stop
tokens), answered by each prompt's samples as token ids, the makespan of the generation alone and
vLLM's speculative counters over it where it reports them. The child ends at the end of its input.
vLLM's log goes to stderr, so that stdout carries the answers alone.

vLLM's CPU build fails on a per-request seed with n > 1 ("CPU Generator does not use offset"), so the
seed is the engine's global one.
"""

from __future__ import annotations

import json
import os
import sys
import time

NGRAM_TOKENS = 4  # drafted tokens a step for vLLM's n-gram method (suffix decoding sizes its own)
KV_MARGIN = 1.5  # the KV cache's share over what a full batch of the longest requests holds
KV_SPARE_BYTES = 256 << 20


def speculative_config(method: str) -> dict | None:
    """vLLM's `speculative_config` for a method name ("" for plain decoding); suffix decoding keeps
    vLLM's defaults (drafts up to its tree depth, 24, as its spec factor allows)."""
    if not method:
        return None
    if method == "ngram":
        return {
            "method": method,
            "num_speculative_tokens": NGRAM_TOKENS,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 4,
        }
    return {"method": method}


def kv_cache_bytes(settings: dict) -> int:
    """A KV cache that holds a full batch of the longest requests, with margin: vLLM's CPU backend
    otherwise takes a share of the machine's memory, too much where several engines are kept."""
    with open(os.path.join(settings["model_dir"], "config.json")) as f:
        config = json.load(f)
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    width = 2 if settings["dtype"] in ("bfloat16", "float16") else 4
    per_token = 2 * config["num_hidden_layers"] * kv_heads * head_dim * width
    tokens = settings["max_batch_size"] * settings["max_model_len"]
    return int(tokens * per_token * KV_MARGIN) + KV_SPARE_BYTES


def build_engine(settings: dict):
    from vllm import LLM

    return LLM(
        model=settings["model_dir"],
        dtype=settings["dtype"],
        seed=settings["seed"],
        max_num_seqs=settings["max_batch_size"],
        max_model_len=settings["max_model_len"],
        speculative_config=speculative_config(settings["method"]),
        kv_cache_memory_bytes=kv_cache_bytes(settings),
        disable_log_stats=False,
    )


def sampling(request: dict):
    from vllm import SamplingParams

    return SamplingParams(
        n=request["n"],
        temperature=request["temperature"],
        top_k=request["top_k"],  # 0: none, in both engines
        top_p=request["top_p"],
        max_tokens=request["max_tokens"],
        stop_token_ids=request["stop_token_ids"],
    )


def prompts(request: dict) -> list:
    from vllm.inputs import TokensPrompt

    return [TokensPrompt(prompt_token_ids=ids) for ids in request["prompts"]]


def speculative_counters(llm) -> dict[str, float]:
    """vLLM's speculative counters (drafts, draft tokens, accepted tokens), summed; {} where absent."""
    wanted = {
        "vllm:spec_decode_num_drafts": "num_drafts",
        "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
        "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
    }
    counters: dict[str, float] = {}
    for metric in llm.get_metrics():
        if metric.name in wanted:
            key = wanted[metric.name]
            counters[key] = counters.get(key, 0.0) + float(metric.value)
    return counters


def start(message: dict):
    """The engine and its start-up seconds: construction and one warm-up generation."""
    begun = time.perf_counter()
    llm = build_engine(message["settings"])
    llm.generate(prompts(message["warmup"]), sampling(message["warmup"]), use_tqdm=False)
    return llm, time.perf_counter() - begun


def generate(llm, request: dict) -> dict:
    before = speculative_counters(llm)
    begun = time.perf_counter()
    results = llm.generate(prompts(request), sampling(request), use_tqdm=False)
    makespan = time.perf_counter() - begun
    after = speculative_counters(llm)
    return {
        "makespan_seconds": makespan,
        "outputs": [[list(sample.token_ids) for sample in result.outputs] for result in results],
        "speculative": {key: value - before.get(key, 0.0) for key, value in after.items()},
    }


def main() -> int:
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever vLLM prints goes to stderr

    def answer(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    llm, startup = start(json.loads(sys.stdin.readline()))
    answer({"startup_seconds": startup})
    for line in sys.stdin:
        answer(generate(llm, json.loads(line)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
