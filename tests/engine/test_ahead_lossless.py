"""Exact mode with drafts made ahead in another process (`suffix-ahead`): the same tokens and
log-probabilities as plain decoding, with drafts accepted."""

from __future__ import annotations

import time

from specroll.drafting.registry import DrafterContext, make_drafter
from specroll.engine.engine import add_requests
from specroll.policies.fixed import FixedDraftLength

from helpers import assert_lossless, make_engine, rollout, workload

FORWARD_SECONDS = 0.005  # the tiny model's forwards take far less than a real one's: the drafts lag less


def test_suffix_ahead_is_lossless_and_its_drafts_are_accepted(qwen2_dir):
    plain = rollout(qwen2_dir, workload(num_prompts=4))
    drafter = make_drafter("suffix-ahead", DrafterContext(vocab_size=97))
    try:
        assert drafter.wait_until_ready(timeout=30)
        engine = make_engine(qwen2_dir, drafter, FixedDraftLength(4))
        assert not add_requests(engine, spec := workload(num_prompts=4))
        engine.run(on_iteration=lambda finished: time.sleep(FORWARD_SECONDS))
        assert drafter.failure is None
        assert_lossless(plain, spec, engine)  # drafts verified and accepted, and plain's tokens
        assert engine.telemetry.mean_acceptance_length > 1.0
    finally:
        drafter.close()
