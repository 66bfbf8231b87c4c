"""A forward that does not complete (it raises, before or after writing the cache; on a device, an
asynchronous step whose results never come back) confirms nothing to the scheduler: no position
counts as cached that the engine did not see written, and the rollout goes on to exactly the tokens
of a run in which nothing failed."""

from __future__ import annotations

import pytest

from specroll.drafting.oracle import OracleDrafter
from specroll.engine.engine import add_requests
from specroll.policies.fixed import FixedDraftLength

from helpers import assert_same_rollout, make_engine, rollout, workload


class FailingForward:
    """The runner's forward, except that call number `fail_at` raises (having written the cache or not)."""

    def __init__(self, forward, fail_at: int, after_writing: bool) -> None:
        self.forward, self.fail_at, self.after_writing = forward, fail_at, after_writing
        self.num_calls = 0

    def __call__(self, inputs):
        self.num_calls += 1
        if self.num_calls != self.fail_at:
            return self.forward(inputs)
        if self.after_writing:
            self.forward(inputs)
        raise RuntimeError("the forward's results never came back")


@pytest.fixture(scope="module")
def plain(qwen2_dir):
    return rollout(qwen2_dir, workload())


def cache_state(requests):
    return {r.request_id: (r.num_cached, list(r.output_token_ids), r.num_forwards) for r in requests}


@pytest.mark.parametrize("fail_at", [1, 4], ids=["prefill", "verification"])
@pytest.mark.parametrize("after_writing", [False, True], ids=["before-writing", "after-writing"])
def test_a_failed_forward_confirms_nothing_and_the_rollout_goes_on(qwen2_dir, plain, fail_at, after_writing):
    oracle = OracleDrafter({r.request_id: r.output_token_ids for r in plain}, corrupt_every=5, vocab_size=97)
    engine = make_engine(qwen2_dir, oracle, FixedDraftLength(4))
    requests = workload()
    assert not add_requests(engine, requests)
    runner = engine.parts_for_testing().runner
    runner.forward = failing = FailingForward(runner.forward, fail_at, after_writing)
    with pytest.raises(RuntimeError, match="never came back"):
        while True:
            before = cache_state(requests)
            engine.iterate()
    assert failing.num_calls == fail_at and cache_state(requests) == before  # nothing committed or confirmed
    running = engine.parts_for_testing().scheduler.running
    assert running and all(r.num_cached in (0, r.num_tokens - 1) for r in running)
    engine.run()
    assert_same_rollout(plain, requests)
    assert engine.telemetry.num_forwards > fail_at and sum(r.num_accepted for r in requests) > 0
