"""Every policy drives the real engine on a tiny checkpoint without changing a single output token."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))

from helpers import assert_lossless, rollout, workload  # noqa: E402

from specroll.drafting.prompt_lookup import PromptLookupDrafter  # noqa: E402
from specroll.policies.policy_names import make_policy  # noqa: E402


def small_workload():
    return workload(num_prompts=1, n=2, max_tokens=16)


@pytest.fixture(scope="module")
def plain(qwen2_dir):
    return rollout(qwen2_dir, small_workload())


# threshold and bandit give every request the same k, as fixed-K does; these three vary it
@pytest.mark.parametrize("name", ["das", "ladder", "auto"])
def test_policy_is_lossless_in_the_engine(qwen2_dir, plain, name):
    speculative = rollout(qwen2_dir, small_workload(), PromptLookupDrafter(), make_policy(name))
    assert_lossless(plain, speculative, rollout.last_engine)


def test_a_ladder_over_one_drafter_credits_no_rung(qwen2_dir):
    """The ladder names rungs; a single drafter is none of them, so its acceptance is no rung's."""
    policy = make_policy("ladder")
    priors = {name: policy.alpha(name) for name in policy._estimates}
    rollout(qwen2_dir, small_workload(), PromptLookupDrafter(), policy)
    assert rollout.last_engine.telemetry.decode_forwards and any(
        s.num_drafted for s in rollout.last_engine.telemetry.decode_forwards
    )
    assert {name: policy.alpha(name) for name in policy._estimates} == priors


@pytest.mark.parametrize("name", ["das", "auto"])
def test_a_new_rl_step_reaches_the_policys_acceptance_estimates(qwen2_dir, name):
    policy = make_policy(name)
    rollout(qwen2_dir, small_workload(), PromptLookupDrafter(), policy)
    before = policy.tracker.pooled_trials
    assert before > 0
    rollout.last_engine.advance_step(1)
    assert policy.tracker.pooled_trials == min(before, policy.tracker.carried_trials)  # carried, bounded
