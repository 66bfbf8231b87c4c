"""Building the served engine, in the engine thread: its cache sized for the context the server
accepts (or for `--kv-memory`), the limits every request is checked against, and the tokenizer. The HTTP
server (`launch.py`) and the in-process one (`local.py`) build it the same way."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specroll.engine.memory import KvMemory, available_bytes, cache_shape, kv_bytes_per_slot, size_text
from specroll.engine.spec import EngineSpec
from specroll.serve.engine_loop import EngineLoop
from specroll.serve.generate_call import Limits
from specroll.serve.state import ServeState


def build_service(spec: EngineSpec, state: ServeState, engine_loop: EngineLoop) -> Any:
    """In the engine thread: torch's threads, the engine (its cache sized for --max-model-len) and the
    tokenizer."""
    from specroll.engine.factory import build_engine
    from specroll.engine.threads import apply_threads
    from specroll.serve.service import Codec, Service
    from specroll.tokenizer import load_tokenizer

    apply_threads(spec)
    options = state.options
    config = spec.target_config()
    max_model_len = min(options.max_model_len, config.max_position_embeddings)
    spec = replace(spec, max_tokens=max_model_len)
    if options.kv_memory is not None:
        spec = sized_by_budget(spec, config, options.kv_memory)
        max_model_len = spec.max_tokens
    engine = build_engine(spec, 0, fit_memory=options.kv_memory is None)
    print(cache_line(engine.config, config), flush=True)
    state.options = replace(options, max_model_len=max_model_len)
    state.limits = Limits(
        vocab_size=config.vocab_size,
        max_model_len=max_model_len,
        max_tokens=min(options.max_tokens, max_model_len - 1),
        max_n=options.max_n,
        model_names=options.model_aliases | {options.model_name},
        served_name=options.model_name,
    )
    codec = Codec(load_tokenizer(spec.model_dir))
    return Service(codec, engine_loop, state.metrics), engine


def sized_by_budget(spec: EngineSpec, config, kv_memory: KvMemory) -> EngineSpec:
    """The spec with as many slots as `kv_memory` holds at the asked context, or, where not one slot
    fits, one slot and the context that fits."""
    engine = spec.engine
    per_position = kv_bytes_per_slot(config, 1, engine.cache_dtype)
    extra = engine.max_draft + 1  # a cache slot holds max_model_len + max_draft + 1 positions
    budget = kv_memory.budget(available_bytes(engine.device))
    slots, positions = cache_shape(budget, per_position, engine.max_batch_size, spec.max_tokens + extra)
    if positions - extra < 2:
        raise ValueError(
            f"--kv-memory: {size_text(budget)} holds {positions} positions of {per_position} bytes; "
            f"a context needs {extra + 2} at least"
        )
    return replace(spec, max_tokens=positions - extra, engine=replace(engine, max_batch_size=slots))


def cache_line(engine_config, config) -> str:
    """What the KV cache holds: its size, slots (requests at once) and positions a slot."""
    positions = engine_config.cache_capacity
    total = engine_config.max_batch_size * kv_bytes_per_slot(config, positions, engine_config.cache_dtype)
    return (
        f"specroll serve: KV cache {size_text(total)}: {engine_config.max_batch_size} slots x {positions} "
        f"positions (a context of {engine_config.max_model_len}; --kv-memory sets the budget)"
    )
