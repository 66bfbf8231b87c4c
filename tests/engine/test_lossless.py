"""Exact mode: speculative and plain rollouts with one seed give the same tokens and log-probabilities."""

from __future__ import annotations

import pytest

from specroll.drafting.oracle import OracleDrafter
from specroll.drafting.protocol import Draft
from specroll.drafting.prompt_lookup import PromptLookupDrafter
from specroll.policies.fixed import FixedDraftLength

from helpers import assert_lossless, rollout, workload

SAMPLING = [dict(temperature=1.0), dict(temperature=0.0), dict(temperature=0.7, top_k=20, top_p=0.9)]


def outputs(requests):
    return {r.request_id: r.output_token_ids for r in requests}


@pytest.mark.parametrize("params", SAMPLING)
def test_prompt_lookup_is_lossless(qwen2_dir, params):
    plain = rollout(qwen2_dir, workload(**params))
    spec = rollout(qwen2_dir, workload(**params), PromptLookupDrafter(), FixedDraftLength(4))
    assert_lossless(plain, spec, rollout.last_engine)


@pytest.mark.parametrize("params", SAMPLING)
def test_oracle_with_wrong_drafts_is_lossless_and_fast(qwen2_dir, params):
    plain = rollout(qwen2_dir, workload(**params))
    oracle = OracleDrafter(outputs(plain), corrupt_every=5, vocab_size=97)
    spec = rollout(qwen2_dir, workload(**params), oracle, FixedDraftLength(4))
    assert_lossless(plain, spec, rollout.last_engine)
    assert rollout.last_engine.telemetry.mean_acceptance_length > 2.0


def test_tokens_do_not_depend_on_batch_composition(qwen2_dir):
    together = rollout(qwen2_dir, workload())
    alone = rollout(qwen2_dir, [r for r in workload() if r.request_id == 9])
    assert alone[0].output_token_ids == together[9].output_token_ids


def test_seed_changes_samples(qwen2_dir):
    a = rollout(qwen2_dir, workload(), seed=1)
    b = rollout(qwen2_dir, workload(), seed=2)
    assert outputs(a) != outputs(b)


def test_siblings_differ(qwen2_dir):
    requests = rollout(qwen2_dir, workload())
    group = [tuple(r.output_token_ids) for r in requests if r.group_id == 3]
    assert len(set(group)) > 1


@pytest.mark.parametrize("draw", ["coupled", "argmax"])
def test_draft_model_is_lossless(qwen2_dir, tmp_path, draw):
    from specroll.drafting.draft_model import DraftModelDrafter
    from tiny_checkpoints import save_tiny_checkpoint

    save_tiny_checkpoint("qwen2", tmp_path, logit_scale=30.0)  # same weights: drafts mostly right
    for params in SAMPLING:
        plain = rollout(qwen2_dir, workload(**params))
        drafter = DraftModelDrafter.from_pretrained(tmp_path, 16, 128, draw=draw)
        spec = rollout(qwen2_dir, workload(**params), drafter, FixedDraftLength(3))
        assert_lossless(plain, spec, rollout.last_engine)
        assert rollout.last_engine.telemetry.acceptance_rate > 0.2


def test_coupled_drafts_of_the_target_itself_are_its_own_samples(tmp_path):
    """With q = p, drawing the draft at the target's own uniform reproduces the target's samples: at
    temperature 1 every draft token is accepted (to the rounding between the two runners' forwards),
    where the same model's argmax is accepted only where the target happened to sample its argmax."""
    from specroll.drafting.draft_model import DraftModelDrafter
    from tiny_checkpoints import save_tiny_checkpoint

    save_tiny_checkpoint("qwen2", tmp_path)  # the very weights of the target: q = p
    rates = {}
    for draw in ("coupled", "argmax"):
        params = dict(temperature=1.0, top_k=20, top_p=0.95)
        drafter = DraftModelDrafter.from_pretrained(tmp_path, 16, 128, draw=draw, seed=7)  # the engine's seed
        rollout(tmp_path, workload(**params), drafter, FixedDraftLength(3))
        rates[draw] = rollout.last_engine.telemetry.acceptance_rate
    assert rates["coupled"] > 0.97 and rates["argmax"] < rates["coupled"] - 0.2, rates


class BranchingOracle(OracleDrafter):
    """A tree whose first branch is wrong at its root and whose second branch is the oracle's chain,
    so acceptance needs the off-chain branch (and its K/V moved into place)."""

    def _propose(self, query):
        chain = super()._propose(query).token_ids
        if len(chain) < 2:
            return Draft(query.request_id, chain)
        wrong = (chain[0] + 1) % self.vocab_size
        tokens = [wrong, *chain[: query.budget - 1]]
        parents = [-1, -1, *range(1, len(tokens) - 1)]
        return Draft(query.request_id, tokens, parents=parents)


@pytest.mark.parametrize("params", SAMPLING[:2])
def test_tree_drafts_are_lossless_with_fast_numerics(qwen2_dir, params):
    plain = rollout(qwen2_dir, workload(**params), batch_invariant=False)
    tree = BranchingOracle(outputs(plain), vocab_size=97)
    spec = rollout(qwen2_dir, workload(**params), tree, FixedDraftLength(5), batch_invariant=False)
    assert_lossless(plain, spec, rollout.last_engine, logprob_tolerance=1e-5)
    assert rollout.last_engine.telemetry.mean_acceptance_length > 2.5  # the off-chain branch was accepted


@pytest.mark.parametrize("params", SAMPLING[:2])
def test_tree_drafts_give_plain_tokens_to_the_bit_with_batch_invariant_numerics(qwen2_dir, params):
    """Each tree node reads its path's keys in chain order, so accepting the off-chain branch gives
    plain decoding's tokens and log-probabilities exactly."""
    plain = rollout(qwen2_dir, workload(**params))
    tree = BranchingOracle(outputs(plain), vocab_size=97)
    spec = rollout(qwen2_dir, workload(**params), tree, FixedDraftLength(5))
    assert_lossless(plain, spec, rollout.last_engine)
    forwards = rollout.last_engine.telemetry.decode_forwards
    assert max(d for f in forwards for d in f.drafted) > 1  # more than the main chain (its wrong root)
    assert rollout.last_engine.telemetry.mean_acceptance_length > 2.5  # the off-chain branch was accepted


@pytest.mark.parametrize("name", ["prompt-lookup", "own-context", "grouped", "suffix", "suffix-tree"])
def test_every_registered_model_free_drafter_is_lossless(qwen2_dir, name):
    from specroll.drafting.registry import DrafterContext, make_drafter

    plain = rollout(qwen2_dir, workload())
    drafter = make_drafter(name, DrafterContext(vocab_size=97))
    spec = rollout(qwen2_dir, workload(), drafter, FixedDraftLength(6))
    assert_lossless(plain, spec, rollout.last_engine)


def test_history_drafter_learns_across_training_steps_and_is_lossless(qwen2_dir):
    """History drafts only from earlier training steps: step 1 repeats step 0's prompts and drafts
    from step 0's responses to the same problems."""
    from specroll.drafting.history import HistoryDrafter
    from helpers import make_engine
    from specroll.engine.engine import add_requests

    def step_workload(step):
        requests = workload()
        for r in requests:
            r.request_id += 1000 * step
        return requests

    engine = make_engine(qwen2_dir, HistoryDrafter(), FixedDraftLength(6))
    for step in range(2):
        engine.advance_step(step)
        add_requests(engine, spec := step_workload(step))
        engine.run()
    assert engine.telemetry.acceptance_rate > 0.3
    assert_lossless(rollout(qwen2_dir, step_workload(1)), spec, engine)


@pytest.mark.parametrize("policy_name", ["auto", "threshold", "das", "bandit", "ladder"])
def test_every_policy_is_lossless(qwen2_dir, tmp_path, policy_name):
    from specroll.drafting.registry import DrafterContext, make_drafter
    from specroll.engine_config import EngineConfig
    from specroll.policies.policy_names import make_policy
    from tiny_checkpoints import save_tiny_checkpoint

    save_tiny_checkpoint("qwen2", tmp_path, logit_scale=30.0)
    drafter = make_drafter(
        "ladder" if policy_name == "ladder" else "suffix",
        DrafterContext(97, EngineConfig(max_batch_size=16, max_model_len=96), draft_model_dir=tmp_path),
    )
    plain = rollout(qwen2_dir, workload())
    spec = rollout(qwen2_dir, workload(), drafter, make_policy(policy_name))
    assert_lossless(plain, spec, rollout.last_engine)
