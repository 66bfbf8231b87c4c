"""The coordinator over real engines in this process: the same tokens as one engine under every
dispatch, through a lost worker, and with a refused request among good ones."""

from __future__ import annotations


import pytest

from specroll.rollout import (
    RolloutConfig,
    encode_prompts,
    load_problems,
    make_requests,
    run_on_workers,
    run_rollout,
)
from specroll.engine.request import Request, SamplingParams
from specroll.engine_config import EngineConfig
from specroll.tokenizer import load_tokenizer

BASE = RolloutConfig(num_prompts=6, n=4, max_tokens=48, engine=EngineConfig(seed=5, max_batch_size=8))


@pytest.fixture(scope="module")
def one_engine():
    return run_rollout(BASE)


def on_workers(config: RolloutConfig, on_report=None, extra: list[Request] = ()):
    task, problems = load_problems(config)
    tokenizer = load_tokenizer(config.model_dir)
    prompts = encode_prompts(tokenizer, task, problems)
    requests = [*make_requests(config, tokenizer, problems.values(), prompts), *extra]
    result = run_on_workers(config, requests, tokenizer, task, problems, on_report)
    # the coordinator hands results out as its own records; the requests given stay as they were
    assert all(r.output_token_ids == [] and r.finish_reason is None and r.error is None for r in requests)
    return result


def assert_same_tokens(expected, got):
    assert [r.request_id for r in got.records[: len(expected.records)]] == [
        r.request_id for r in expected.records
    ]
    for a, b in zip(expected.records, got.records):
        assert (a.token_ids, a.logprobs, a.finish_reason, a.text) == (
            b.token_ids,
            b.logprobs,
            b.finish_reason,
            b.text,
        )


@pytest.mark.parametrize("dispatch", ["static", "divided", "context-aware"])
def test_every_dispatch_gives_one_engines_tokens(one_engine, dispatch):
    config = BASE.with_cluster(num_workers=3, dispatch=dispatch, chunk_tokens=12, backend="inline")
    result = on_workers(config)
    assert_same_tokens(one_engine, result)
    assert result.cluster["lost_workers"] == 0
    if dispatch != "static":  # 12-token chunks: some move to another worker, resumed from their tokens
        assert result.cluster["reprefills"] > 0


@pytest.mark.parametrize("dispatch", ["static", "divided"])
def test_a_worker_lost_mid_rollout_loses_no_request_and_no_token(one_engine, dispatch):
    config = BASE.with_cluster(num_workers=2, dispatch=dispatch, chunk_tokens=16, backend="inline")
    state = {}

    def kill_worker_one(coordinator, worker):
        holds_partial = any(coordinator.states[i].token_ids for i in coordinator.slots[1].running)
        if worker == 1 and holds_partial and not state:
            state["killed_holding"] = len(coordinator.slots[1].running)
            coordinator.pool.kill(1)

    result = on_workers(config, kill_worker_one)
    assert state["killed_holding"] > 0
    assert result.cluster["lost_workers"] == 1
    assert all(r.error is None for r in result.records)
    assert_same_tokens(one_engine, result)


def test_a_refused_request_fails_alone(one_engine):
    config = BASE.with_cluster(num_workers=2, backend="inline")
    bad = Request(10_000, 0, 99, (1, 10**9), SamplingParams(config.max_tokens, config.temperature))
    result = on_workers(config, extra=[bad])
    assert_same_tokens(one_engine, result)
    refused = result.records[-1]
    assert refused.request_id == 10_000 and refused.finish_reason == "error"
    assert "outside the vocabulary" in refused.error and refused.token_ids == []


def test_fastest_of_n_copies_stragglers_and_keeps_the_tokens(one_engine):
    config = BASE.with_cluster(num_workers=2, dispatch="static", fastest_of_n=True, backend="inline")
    result = on_workers(config)
    assert result.cluster["copies"] > 0  # the worker that finished first copied the other's stragglers
    assert_same_tokens(one_engine, result)


def test_fastest_of_n_needs_exact_batch_invariant_decoding():
    with pytest.raises(ValueError, match="fastest_of_n .* needs verify 'exact'"):
        BASE.with_cluster(num_workers=2, fastest_of_n=True).with_engine(verify="rejection")
