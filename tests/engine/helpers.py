"""Building engines and workloads over a checkpoint for the engine tests."""

from __future__ import annotations

import torch

from specroll.engine_config import EngineConfig
from specroll.engine.engine import Engine, add_requests
from specroll.engine.request import Request, SamplingParams
from specroll.model.runner import ModelRunner


def make_engine(model_dir, drafter=None, policy=None, **config) -> Engine:
    cfg = EngineConfig(**{"max_batch_size": 16, "max_model_len": 96, "max_draft": 4, "seed": 7, **config})
    dtype = getattr(torch, cfg.dtype)
    runner = ModelRunner.from_pretrained(
        model_dir,
        cfg.max_batch_size,
        cfg.cache_capacity,
        dtype,
        cfg.device,
        batch_invariant=cfg.batch_invariant,
    )
    if cfg.cuda_graphs:
        runner.use_static_forwards(cfg.max_draft + 1)
    return Engine(runner, cfg, drafter, policy)


def workload(num_prompts: int = 6, n: int = 4, temperature: float = 1.0, **params) -> list[Request]:
    requests = []
    for p in range(num_prompts):
        prompt = tuple(2 + (p * 7 + i * 3) % 90 for i in range(3 + p % 5))
        for s in range(n):
            sampling = SamplingParams(
                max_tokens=params.get("max_tokens", 12 + 5 * p),
                temperature=temperature,
                top_k=params.get("top_k", 0),
                top_p=params.get("top_p", 1.0),
            )
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


def assert_same_rollout(plain, spec, logprob_tolerance: float = 0.0) -> None:
    """The same requests in the same order with the same tokens, finish reasons and log-probabilities:
    equal to the bit (batch-invariant numerics) or within the tolerance given (fast numerics: forwards
    of other shapes round otherwise). Lengths are compared before any element is."""
    assert [r.request_id for r in plain] == [r.request_id for r in spec]
    for a, b in zip(plain, spec, strict=True):
        assert len(a.output_token_ids) == len(b.output_token_ids), a.request_id
        assert a.output_token_ids == b.output_token_ids, a.request_id
        assert a.finish_reason == b.finish_reason, a.request_id
        assert len(a.output_logprobs) == len(b.output_logprobs) == len(a.output_token_ids), a.request_id
        assert all(abs(x - y) <= logprob_tolerance for x, y in zip(a.output_logprobs, b.output_logprobs)), (
            a.request_id
        )


def assert_speculated(telemetry) -> None:
    """The rollout verified drafts and accepted some: an identity with plain decoding then means
    something (a run that never drafts is plain decoding, identical by construction)."""
    forwards = telemetry.decode_forwards
    assert sum(f.num_drafted for f in forwards) > 0, "no draft was verified"
    assert sum(f.num_accepted for f in forwards) > 0, "no draft token was accepted"


def assert_lossless(plain, spec, engine, logprob_tolerance: float = 0.0) -> None:
    """`spec` ran on `engine` with speculation, drafted and accepted, and equals `plain`."""
    assert_speculated(engine.telemetry)
    assert_same_rollout(plain, spec, logprob_tolerance)
