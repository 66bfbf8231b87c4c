"""Building engines and workloads over a checkpoint for the engine tests."""

from __future__ import annotations

from specroll.engine.config import EngineConfig
from specroll.engine.engine import Engine, add_requests
from specroll.engine.request import Request, SamplingParams
from specroll.model.runner import ModelRunner


def make_engine(model_dir, drafter=None, policy=None, **config) -> Engine:
    cfg = EngineConfig(**{"max_batch_size": 16, "max_model_len": 96, "max_draft": 4, "seed": 7, **config})
    runner = ModelRunner.from_pretrained(model_dir, cfg.max_batch_size, cfg.cache_capacity,
                                         batch_invariant=cfg.batch_invariant)
    return Engine(runner, cfg, drafter, policy)


def workload(num_prompts: int = 6, n: int = 4, temperature: float = 1.0, **params) -> list[Request]:
    requests = []
    for p in range(num_prompts):
        prompt = tuple(2 + (p * 7 + i * 3) % 90 for i in range(3 + p % 5))
        for s in range(n):
            sampling = SamplingParams(max_tokens=params.get("max_tokens", 12 + 5 * p),
                                      temperature=temperature, top_k=params.get("top_k", 0),
                                      top_p=params.get("top_p", 1.0))
            requests.append(Request(p * n + s, p, s, prompt, sampling))
    return requests


def rollout(model_dir, requests=None, drafter=None, policy=None, **config) -> list[Request]:
    engine = make_engine(model_dir, drafter, policy, **config)
    requests = workload() if requests is None else requests
    errors = add_requests(engine, requests)
    assert not errors, errors
    engine.run()
    rollout.last_engine = engine
    return requests
