"""Exact-mode identity where fp rounding threatens it: a 49,152-token vocabulary.

Without batch-invariant numerics, forwards of other shapes round a row's logits differently (~1e-5),
and on SmolLM2-135M-Instruct a third of 200-token GSM8K responses changed between batch sizes or
between speculative and plain decoding. Each test here is run against the fast numerics as well,
where it finds the difference, so it can fail.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import assert_speculated, rollout, workload

from specroll.drafting.oracle import OracleDrafter
from specroll.engine.telemetry import forward_from_row
from specroll.policies.cost_model import CostModel
from specroll.policies.fixed import FixedDraftLength
from specroll.rollout import RolloutConfig, run_rollout
from specroll.engine_config import EngineConfig


def _outputs(requests):
    return [(r.output_token_ids, r.output_logprobs) for r in requests]


@pytest.mark.parametrize("batch_invariant", [True, False])
def test_batch_size_and_speculation_change_no_bit(large_vocab_dir, batch_invariant):
    run = dict(batch_invariant=batch_invariant)
    wide = rollout(large_vocab_dir, workload(6, 4), max_batch_size=16, **run)
    narrow = rollout(large_vocab_dir, workload(6, 4), max_batch_size=1, **run)
    oracle = OracleDrafter({r.request_id: r.output_token_ids for r in wide})
    spec = rollout(large_vocab_dir, workload(6, 4), oracle, FixedDraftLength(4), max_batch_size=16, **run)
    assert_speculated(rollout.last_engine.telemetry)
    assert rollout.last_engine.telemetry.mean_acceptance_length > 2  # verification forwards of width 5
    same = _outputs(wide) == _outputs(narrow) == _outputs(spec)
    assert same == batch_invariant  # the fast numerics round log-probabilities by batch shape


def test_static_shape_forwards_change_no_bit(large_vocab_dir, one_thread):
    """The forwards CUDA graphs replay (bucketed rows, width and read length; run eagerly here)
    against the dynamic ones, plain and speculative, on the vocabulary where rounding shows."""
    plain = rollout(large_vocab_dir, workload(6, 4), max_batch_size=16)
    oracle = OracleDrafter({r.request_id: r.output_token_ids for r in plain}, corrupt_every=3)
    static = rollout(large_vocab_dir, workload(6, 4), max_batch_size=16, cuda_graphs=True)
    spec = rollout(
        large_vocab_dir, workload(6, 4), oracle, FixedDraftLength(4), max_batch_size=16, cuda_graphs=True
    )
    assert rollout.last_engine.parts_for_testing().runner.static is not None
    assert_speculated(rollout.last_engine.telemetry)
    assert _outputs(plain) == _outputs(static) == _outputs(spec)


def _gsm8k(smollm2_dir, max_batch_size: int, **workload) -> RolloutConfig:
    """Plain decoding of SmolLM2 on GSM8K's chat prompts, 4 samples a prompt."""
    engine = EngineConfig(max_batch_size=max_batch_size)
    return RolloutConfig(model_dir=smollm2_dir, task="gsm8k", n=4, speculate="off", engine=engine, **workload)


def test_smollm2_gsm8k_tokens_do_not_depend_on_batch_or_drafts(smollm2_dir):
    config = _gsm8k(smollm2_dir, num_prompts=2, max_tokens=40, max_batch_size=8)
    plain = run_rollout(config)
    drafts = OracleDrafter({r.request_id: r.token_ids for r in plain.records})
    alone = run_rollout(
        replace(config, speculate="suffix", policy="fixed-4").with_engine(max_batch_size=1), drafter=drafts
    )
    assert sum(row["num_drafted"] for row in alone.telemetry) > 0
    assert alone.summary.mean_acceptance_length > 3  # drafts were verified at batch 1, 5 wide
    assert len(plain.records) == len(alone.records)
    assert [r.token_ids for r in plain.records] == [r.token_ids for r in alone.records]
    assert [r.logprobs for r in plain.records] == [r.logprobs for r in alone.records]
    assert all(r.reward in (0.0, 1.0) for r in plain.records)
    static = run_rollout(
        replace(config, speculate="suffix", policy="fixed-4").with_engine(cuda_graphs=True), drafter=drafts
    )
    assert static.summary.mean_acceptance_length > 3  # static shapes (CUDA graphs' path, eager here), 5 wide
    assert [(r.token_ids, r.logprobs) for r in plain.records] == [
        (r.token_ids, r.logprobs) for r in static.records
    ]


def test_smollm2_trees_chosen_by_auto_change_no_bit(smollm2_dir, tmp_path):
    """`auto` on a profile where width is free at small batch drafts suffix trees among chains, forward
    by forward; the records are plain decoding's to the bit."""
    free_width = CostModel(c_base=0.05, c_tok=1e-3, prices=[(1, 1, 1.0), (1, 17, 0.05 / 0.067)])
    free_width.save(tmp_path / "free-width.cost.json")
    config = _gsm8k(smollm2_dir, num_prompts=1, max_tokens=48, max_batch_size=2)
    plain = run_rollout(config)
    auto = run_rollout(
        replace(config, speculate="suffix", cost_model=tmp_path / "free-width.cost.json").with_engine(
            max_draft=16
        )
    )
    shapes = {forward_from_row(row).shape for row in auto.telemetry}
    assert any(s.startswith("tree") for s in shapes), shapes  # auto chose trees ...
    assert sum(row["num_accepted"] for row in auto.telemetry if row["tree"]) > 0  # ... that were accepted
    assert [(r.token_ids, r.logprobs) for r in plain.records] == [
        (r.token_ids, r.logprobs) for r in auto.records
    ]
