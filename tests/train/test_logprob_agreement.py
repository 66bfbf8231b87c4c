"""The trainer's log-probabilities are the engine's: before each update every token's importance ratio
is 1, whatever the sampling settings the CLI accepts. Under batch-invariant numerics (the default)
it is 1 to the bit: the trainer's forward is the engine's model with the engine's numerics, and a
row's logits do not depend on the forward that computes them (`specroll.train.policy_forward`);
Hugging Face's forward of the same weights is ~1e-5 off. With fast numerics the ratio is 1 to the
rounding between the engine's decode steps and the trainer's prefill. With the truncated
distribution's log-probabilities on one side and the full softmax on the other, top-k or top-p made
the ratio log(kept mass) off and clipped tokens of an unmoved policy."""

from __future__ import annotations

import pytest

from specroll.rollout import RolloutConfig
from specroll.engine_config import EngineConfig
from specroll.train.grpo_config import GRPOConfig
from specroll.train.trainer import GRPOTrainer

ROUNDING = 1e-4  # fast numerics: the engine's decode vs the trainer's prefill in fp32
SAMPLINGS = [
    dict(),
    dict(top_k=3),
    dict(top_p=0.8),
    dict(top_k=3, top_p=0.8),
    dict(temperature=0.6, top_k=5),
    dict(temperature=0.0),
]
IDS = ["full", "top-k", "top-p", "both", "t0.6-top-k", "greedy"]


def _history(sampling: dict, **engine) -> list:
    engine_config = EngineConfig(max_batch_size=16, **engine)
    rollout = RolloutConfig(
        speculate="off", num_prompts=4, n=4, max_tokens=32, engine=engine_config, **sampling
    )
    history = GRPOTrainer(GRPOConfig(rollout, steps=2, lr=1e-3)).run()
    assert history[0].clip_fraction == 0.0
    if sampling.get("temperature") != 0.0:  # (greedy groups are identical: no advantage, no update)
        assert history[0].weights_sha256 != history[1].weights_sha256  # step 1 ran on moved weights
    return history


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=IDS)
def test_every_tokens_ratio_is_exactly_one_before_each_update(sampling):
    history = _history(sampling)
    assert [m.max_log_ratio for m in history] == [0.0, 0.0]


def test_in_bfloat16_the_ratio_is_exactly_one_too():
    """The engine's weights are the trainer's fp32 weights rounded to bf16; the trainer's forward
    rounds them the same way, gradients flowing back to the fp32 weights."""
    history = _history(dict(), dtype="bfloat16")
    assert [m.max_log_ratio for m in history] == [0.0, 0.0]


@pytest.mark.parametrize("sampling", [SAMPLINGS[0], SAMPLINGS[3]], ids=[IDS[0], IDS[3]])
def test_with_fast_numerics_the_ratio_is_one_to_the_rounding(sampling):
    history = _history(sampling, batch_invariant=False)
    assert [m.max_log_ratio < ROUNDING for m in history] == [True, True], [m.max_log_ratio for m in history]
