"""The trainer's log-probabilities are the engine's: before each update every token's importance ratio
is 1 (to the rounding between the engine's forward and the trainer's), whatever the sampling settings
the CLI accepts. With the truncated distribution's log-probabilities on one side and the full softmax
on the other, top-k or top-p made the ratio log(kept mass) off and clipped tokens of an unmoved policy."""

from __future__ import annotations

import pytest

from specroll.rollout import RolloutConfig
from specroll.engine_config import EngineConfig
from specroll.train.grpo_config import GRPOConfig
from specroll.train.trainer import GRPOTrainer

SMALL = dict(num_prompts=4, n=4, max_tokens=32, engine=EngineConfig(max_batch_size=16))
ROUNDING = 1e-4  # engine vs trainer forward in fp32; a truncation's log(kept mass) is far larger


@pytest.mark.parametrize(
    "sampling",
    [
        dict(),
        dict(top_k=3),
        dict(top_p=0.8),
        dict(top_k=3, top_p=0.8),
        dict(temperature=0.6, top_k=5),
        dict(temperature=0.0),
    ],
    ids=["full", "top-k", "top-p", "both", "t0.6-top-k", "greedy"],
)
def test_every_tokens_ratio_is_one_before_each_update(sampling):
    config = GRPOConfig(RolloutConfig(speculate="off", **SMALL, **sampling), steps=2, lr=1e-3)
    history = GRPOTrainer(config).run()
    assert [m.max_log_ratio < ROUNDING for m in history] == [True, True], [m.max_log_ratio for m in history]
    assert history[0].clip_fraction == 0.0
    if sampling.get("temperature") != 0.0:  # (greedy groups are identical: no advantage, no update)
        assert history[0].weights_sha256 != history[1].weights_sha256  # step 1 ran on moved weights
