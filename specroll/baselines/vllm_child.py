"""Runs one workload through vLLM's offline engine (`vllm.LLM`); executed by the vLLM peer environment's
Python (`make vllm-peer`), never imported by specroll, so it imports nothing of specroll.

Usage: python vllm_child.py REQUEST.json RESULT.json. The request holds the model's directory, the
prompts as token ids, the sampling settings, the number of samples a prompt, the batch size, the seed
and the speculative method ("" for none); the result holds each prompt's samples as token ids, the
start-up seconds (building the engine and one short warm-up generation), the makespan of the
generation alone, and vLLM's speculative counters where it reports them.

vLLM's CPU build fails on a per-request seed with n > 1 ("CPU Generator does not use offset"), so the
seed is the engine's global one.
"""

from __future__ import annotations

import json
import sys
import time

SPECULATIVE_TOKENS = 4  # drafted tokens a step for vLLM's speculative methods
# the share of the machine's memory vLLM's CPU backend takes (weights and KV cache): its default, 0.92 of
# the node, fails to start where other processes hold memory; a small model needs far less
MEMORY_SHARE = 0.3


def speculative_config(method: str) -> dict | None:
    """vLLM's `speculative_config` for a method name ("" for plain decoding)."""
    if not method:
        return None
    config: dict = {"method": method, "num_speculative_tokens": SPECULATIVE_TOKENS}
    if method == "ngram":
        config.update(prompt_lookup_min=2, prompt_lookup_max=4)
    return config


def build_engine(request: dict):
    from vllm import LLM

    return LLM(
        model=request["model_dir"],
        dtype=request["dtype"],
        seed=request["seed"],
        max_num_seqs=request["max_batch_size"],
        max_model_len=request["max_model_len"],
        speculative_config=speculative_config(request["method"]),
        gpu_memory_utilization=MEMORY_SHARE,
        disable_log_stats=False,
    )


def sampling(request: dict, max_tokens: int, n: int):
    from vllm import SamplingParams

    return SamplingParams(
        n=n,
        temperature=request["temperature"],
        top_k=request["top_k"],  # 0: none, in both engines
        top_p=request["top_p"],
        max_tokens=max_tokens,
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


def run(request: dict) -> dict:
    start = time.perf_counter()
    llm = build_engine(request)
    llm.generate(prompts(request)[:1], sampling(request, 8, 2), use_tqdm=False)  # warm-up
    before = speculative_counters(llm)
    startup = time.perf_counter() - start
    start = time.perf_counter()
    results = llm.generate(
        prompts(request), sampling(request, request["max_tokens"], request["n"]), use_tqdm=False
    )
    makespan = time.perf_counter() - start
    after = speculative_counters(llm)
    return {
        "startup_seconds": startup,
        "makespan_seconds": makespan,
        "outputs": [[list(sample.token_ids) for sample in result.outputs] for result in results],
        "speculative": {key: value - before.get(key, 0.0) for key, value in after.items()},
    }


def main(argv: list[str]) -> int:
    request_path, result_path = argv[1:3]
    with open(request_path) as f:
        request = json.load(f)
    result = run(request)
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
