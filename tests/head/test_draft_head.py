"""The draft head, from its features to the engine: what the engine hands it is the target's own
hidden states at the right positions, training moves its distribution toward the target's, and
drafting with it changes no token and no log-probability, in exact and in rejection mode."""

from __future__ import annotations

import copy
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specroll.drafting.draft_head import DraftHeadDrafter, drafting_dtype
from specroll.drafting.protocol import BaseDrafter
from specroll.head.features import teacher_forced
from specroll.drafting.head_model import DraftHead, HeadConfig, check_compatible, load_head
from specroll.head.training import HeadTrainer, HeadTrainConfig, make_batch, windows
from specroll.head.warm_start import EPOCHS, WarmStartConfig, warm_start
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.policies.fixed import FixedDraftLength

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from helpers import assert_same_rollout, rollout, workload  # noqa: E402


def _embedding(runner: ModelRunner) -> torch.Tensor:
    return runner.model.model.embed_tokens.weight


@pytest.fixture(scope="module")
def trained(qwen2_dir, tmp_path_factory):
    """A head warm-started for 30 epochs on the target's own plain rollout (bounded by epochs, not
    seconds, so that a loaded machine trains the same head)."""
    done = rollout(qwen2_dir, workload(num_prompts=8, n=4, max_tokens=40), max_model_len=64)
    runner = ModelRunner.from_pretrained(qwen2_dir, 8, 64)
    sequences = teacher_forced(runner, [r.prompt_token_ids for r in done], [r.output_token_ids for r in done])
    config = WarmStartConfig(
        seconds=600, max_epochs=30, draft_vocab_size=64, train=HeadTrainConfig(window=16)
    )
    before = warm_start(
        sequences,
        _embedding(runner),
        runner.model.lm_head.weight,
        WarmStartConfig(seconds=0.0, draft_vocab_size=64, train=HeadTrainConfig(window=16)),
    )
    after = warm_start(sequences, _embedding(runner), runner.model.lm_head.weight, config)
    directory = after.head.save(tmp_path_factory.mktemp("head"))
    return directory, before, after, sequences


def test_teacher_forced_features_are_the_runner_hidden_states_at_each_position(qwen2_dir):
    runner = ModelRunner.from_pretrained(qwen2_dir, 2, 32)
    prompt, response = [5, 17, 33], [40, 41, 42, 43]
    (seq,) = teacher_forced(runner, [prompt], [response])
    assert seq.tokens.tolist() == [33, 40, 41, 42, 43]
    for j in range(1, 5):  # position of token j-1 of the response: a fresh forward's last hidden state
        fresh = ModelRunner.from_pretrained(qwen2_dir, 1, 32)
        out = fresh.forward([SequenceInput(0, 0, [*prompt, *response[:j]])])
        torch.testing.assert_close(seq.hidden[j], out.hidden[0, 0], rtol=1e-5, atol=1e-5)
    assert torch.all(seq.top_probs[:, :-1] >= seq.top_probs[:, 1:])  # most likely first


def test_training_moves_the_head_toward_the_target(trained):
    _, before, after, _ = trained
    assert before.num_steps == 0 and after.num_steps > 0
    for d, (b, a) in enumerate(zip(before.held_out.overlap, after.held_out.overlap)):
        assert a > b + 0.1, f"depth {d + 1}: overlap {b:.3f} -> {a:.3f}"
    assert after.held_out.loss < before.held_out.loss


def test_a_warm_start_bounded_by_epochs_spends_its_schedule_by_epochs(trained, qwen2_dir):
    """The learning rate follows whichever budget runs out first: bounded by epochs, its schedule
    reaches its end however fast the machine is, and the same epochs train the same head."""
    *_, sequences = trained
    runner = ModelRunner.from_pretrained(qwen2_dir, 1, 8)
    config = WarmStartConfig(seconds=1e6, max_epochs=3, draft_vocab_size=64, train=HeadTrainConfig(window=16))
    spent, heads = [], []
    for _ in range(2):
        torch.manual_seed(0)
        result = warm_start(
            sequences,
            _embedding(runner),
            runner.model.lm_head.weight,
            config,
            lambda now, _: spent.append(now.fraction),
        )
        heads.append(result.head.state_dict())
    assert result.num_epochs == pytest.approx(3.0) and result.ended_by == EPOCHS
    steps = len(spent) // 2  # the last step of a run starts one step short of the schedule's end
    assert spent[steps - 1] == pytest.approx(1 - 1 / steps)
    for name, weight in heads[0].items():
        torch.testing.assert_close(weight, heads[1][name], rtol=0, atol=0)


def test_bf16_training_computes_the_fp32_loss_within_rounding_and_keeps_fp32_weights(trained):
    _, _, after, sequences = trained
    config = HeadTrainConfig(window=16)
    batch = make_batch(sequences, windows(sequences, 16, config.depth)[:8], 16)
    embedding = torch.randn(after.head.config.vocab_size, after.head.config.hidden_size)
    losses, measured = {}, {}
    for precision in ("fp32", "bf16"):
        head = copy.deepcopy(after.head)
        trainer = HeadTrainer(head, embedding, replace(config, precision=precision))
        assert trainer.bf16 == (precision == "bf16")
        measured[precision] = trainer.evaluate(batch).loss
        losses[precision] = trainer.step(batch).loss  # the batch's loss before the update
        assert all(p.dtype == torch.float32 for p in head.parameters())
        assert not torch.equal(head.fuse.weight, after.head.fuse.weight)
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)
    assert losses["bf16"] != losses["fp32"]  # the matmuls did run in bf16
    assert measured["bf16"] == measured["fp32"]  # evaluation is at full precision either way
    with pytest.raises(ValueError, match="precision 'fp16'"):
        HeadTrainConfig(precision="fp16")


def test_the_match_rate_adds_its_weight_times_the_miss_rate_to_the_loss(trained):
    _, _, after, sequences = trained
    batch = make_batch(sequences, windows(sequences, 16, 3)[:8], 16)
    embedding = torch.randn(after.head.config.vocab_size, after.head.config.hidden_size)
    loss = {
        weight: HeadTrainer(
            copy.deepcopy(after.head), embedding, HeadTrainConfig(window=16, acceptance_weight=weight)
        )
        .evaluate(batch)
        .loss
        for weight in (0.0, 2.0, 4.0)
    }
    miss = (loss[2.0] - loss[0.0]) / 2  # the mean rate at which a draft misses the target's sample
    assert 0 < miss < 1
    assert loss[4.0] - loss[0.0] == pytest.approx(4 * miss, rel=1e-4)
    with pytest.raises(ValueError, match="acceptance_top >= 1"):
        HeadTrainConfig(acceptance_top=0)


def test_a_head_drafts_in_its_drafting_dtype_and_trainers_copy_its_saved_weights(trained, qwen2_dir):
    directory = trained[0]
    runner = ModelRunner.from_pretrained(qwen2_dir, 2, 32)
    embedding = _embedding(runner)
    drafter = DraftHeadDrafter.from_dir(directory, embedding)
    assert drafter.head.lm_head.weight.dtype == drafting_dtype(embedding)
    saved = load_head(directory).state_dict()
    copied = drafter.trainable_copy().state_dict()
    assert all(torch.equal(copied[name], saved[name]) for name in saved)  # same dtypes, same bits
    assert copied["lm_head.weight"].dtype == torch.float32


def test_windows_cover_every_position_as_a_target_at_every_depth():
    class Seq:
        num_positions = 40

    spans = windows([Seq()], window=16, depth=3)
    for d in range(1, 4):
        covered = {s + t for _, s in spans for t in range(d, 16) if s + t < 40}
        assert covered == set(range(d, 40))


def test_a_saved_head_loads_with_its_weights_and_refuses_another_target(trained, qwen2_dir):
    directory, _, after, _ = trained
    loaded = load_head(directory)
    for name, value in after.head.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name
    with pytest.raises(ValueError, match="vocabulary"):
        check_compatible(loaded, 64, 1000, str(directory))
    with pytest.raises(FileNotFoundError, match="no draft head"):
        load_head(directory.parent)


def test_the_engine_hands_the_head_the_hidden_state_that_drew_each_newest_token(qwen2_dir):
    """Every state the drafter receives equals a teacher-forced forward's at that position."""

    class Recorder(BaseDrafter):
        needs_features = True

        def __init__(self):
            self.seen = []

        def observe_features(self, features):
            self.seen.append(features)

        def propose(self, queries):
            from specroll.drafting.protocol import Draft

            return [Draft(q.request_id, [7, 8][: q.budget]) for q in queries]

    recorder = Recorder()
    done = rollout(qwen2_dir, workload(num_prompts=3, n=2), recorder, FixedDraftLength(2))
    runner = ModelRunner.from_pretrained(qwen2_dir, 8, 96)
    truth = teacher_forced(runner, [r.prompt_token_ids for r in done], [r.output_token_ids for r in done])
    by_id = {r.request_id: (r, t) for r, t in zip(done, truth)}
    checked = 0
    for features in recorder.seen:
        row = 0
        for rid, n, length, tokens in zip(
            features.request_ids, features.num_kept, features.context_lengths, features.token_ids
        ):
            request, seq = by_id[rid]
            first = length - 1 - n - (len(request.prompt_token_ids) - 1)  # index into the sequence
            context = [*request.prompt_token_ids, *request.output_token_ids]
            assert list(tokens[: n + 1]) == context[length - 1 - n : length][: len(tokens)]
            if first + n <= seq.num_positions:
                torch.testing.assert_close(
                    features.hidden[row : row + n], seq.hidden[first : first + n], rtol=1e-4, atol=1e-4
                )
                checked += n
            row += n
    assert checked > 100


@pytest.mark.parametrize(
    "draw, rule", [("coupled", "inverse-cdf"), ("coupled", "gumbel"), ("argmax", "gumbel")]
)
@pytest.mark.parametrize("batch", [1, 16])
def test_drafting_with_the_head_changes_no_token(trained, qwen2_dir, draw, rule, batch):
    directory, *_ = trained
    plain = rollout(qwen2_dir, workload(), max_batch_size=batch, sampling_rule=rule)
    runner_embedding = rollout.last_engine.input_embeddings()
    drafter = DraftHeadDrafter.from_dir(directory, runner_embedding, draw=draw, seed=7, rule=rule)
    spec = rollout(
        qwen2_dir, workload(), drafter, FixedDraftLength(4), max_batch_size=batch, sampling_rule=rule
    )
    assert_same_rollout(plain, spec)
    telemetry = rollout.last_engine.telemetry
    assert telemetry.mean_acceptance_length > 1.3  # the head's drafts were verified, and many kept


def test_the_gumbel_rule_changes_the_tokens_not_their_distribution(qwen2_dir):
    """Another rule, other samples (so it is part of what fixes a rollout, like the seed)."""
    inverse = rollout(qwen2_dir, workload(), sampling_rule="inverse-cdf")
    gumbel = rollout(qwen2_dir, workload(), sampling_rule="gumbel")
    assert [r.output_token_ids for r in inverse] != [r.output_token_ids for r in gumbel]


def test_coupled_drafting_accepts_more_than_argmax_at_temperature_one(trained, qwen2_dir):
    directory, *_ = trained
    lengths = {}
    for draw in ("coupled", "argmax"):
        rollout(qwen2_dir, workload(), None)
        embedding = rollout.last_engine.input_embeddings()
        drafter = DraftHeadDrafter.from_dir(directory, embedding, draw=draw, seed=7)
        rollout(qwen2_dir, workload(), drafter, FixedDraftLength(4))
        lengths[draw] = rollout.last_engine.telemetry.mean_acceptance_length
    assert lengths["coupled"] > lengths["argmax"], lengths


NUM = 1000
PROMPT = (5, 17, 33, 5, 17)


def _histogram(model_dir, drafter=None, policy=None, **config):
    from specroll.engine.request import Request, SamplingParams

    requests = [Request(i, 0, i, PROMPT, SamplingParams(max_tokens=3)) for i in range(NUM)]
    done = rollout(model_dir, requests, drafter, policy, max_batch_size=256, **config)
    return Counter(tuple(r.output_token_ids) for r in done)


def _total_variation(a: Counter, b: Counter) -> float:
    return 0.5 * sum(abs(a[k] - b[k]) for k in set(a) | set(b)) / NUM


def test_rejection_mode_with_the_heads_q_follows_the_target(trained, qwen2_dir):
    """Speculative sampling with the head's own q: sequences of three tokens follow plain sampling's
    distribution as closely as two plain runs with different seeds do."""
    directory, *_ = trained
    plain = _histogram(qwen2_dir, seed=1)
    noise_floor = _total_variation(plain, _histogram(qwen2_dir, seed=2))
    embedding = rollout.last_engine.input_embeddings()
    drafter = DraftHeadDrafter.from_dir(directory, embedding, draw="sample", seed=5)
    spec = _histogram(qwen2_dir, drafter, FixedDraftLength(2), verify="rejection", seed=3)
    assert rollout.last_engine.telemetry.mean_acceptance_length > 1.05  # drafts were kept
    assert _total_variation(plain, spec) < 1.5 * noise_floor + 0.02


def test_a_head_for_another_model_is_refused_by_name(qwen2_dir):
    head = DraftHead(HeadConfig(32, 50, 8), torch.arange(8))
    with pytest.raises(ValueError, match="hidden size 32"):
        DraftHeadDrafter(head, torch.zeros(97, 64))


def test_the_policy_prices_the_heads_drafts_as_measured(trained, qwen2_dir, tmp_path, monkeypatch):
    """The head times itself once, where the engine is built, and the policy's price of a draft token
    is that measurement, not the profile's draft model: equal to float rounding (relative 1e-12; the
    price is the measured affine, copied), at every batch size and draft length."""
    from specroll.engine.factory import build_engine
    from specroll.engine.spec import EngineSpec
    from specroll.policies.cost_model import DEFAULT_COST_MODEL

    measurements = []
    timed = DraftHeadDrafter.draft_cost
    monkeypatch.setattr(
        DraftHeadDrafter, "draft_cost", lambda self: measurements.append(timed(self)) or measurements[-1]
    )
    directory, *_ = trained
    cost = tmp_path / "fit.cost.json"
    DEFAULT_COST_MODEL.save(cost)
    spec = EngineSpec(
        qwen2_dir, 16, drafter="draft-head", draft_head_dir=directory, cost_model=cost, threads=1
    )
    engine = build_engine(spec, longest_prompt=8)
    assert len(measurements) == 1
    intercept, slope = measurements[0]
    assert intercept >= 0 and slope >= 0 and intercept + slope > 0
    priced = engine.parts_for_testing().policy.cost_model  # auto weighs the head's cost against its gain
    assert priced.draft_affine != DEFAULT_COST_MODEL.draft_affine
    for batch, length in ((1, 1), (16, 3), (256, 5)):
        measured = length * (intercept + slope * batch)
        assert priced.draft_seconds(batch, length) == pytest.approx(measured, rel=1e-12, abs=0.0)


def test_a_head_combined_with_suffix_drafters_gets_its_features_and_changes_no_token(trained, qwen2_dir):
    from specroll.drafting.combined import CombinedDrafter
    from specroll.drafting.own_context import OwnContextDrafter

    directory, *_ = trained
    plain = rollout(qwen2_dir, workload())
    embedding = rollout.last_engine.input_embeddings()
    head = DraftHeadDrafter.from_dir(directory, embedding, seed=7, with_scores=True)
    combined = CombinedDrafter([head, OwnContextDrafter()])
    assert combined.needs_features
    spec = rollout(qwen2_dir, workload(), combined, FixedDraftLength(4))
    assert_same_rollout(plain, spec)
    sources = {
        d.sources[i] for d in rollout.last_engine.telemetry.decode_forwards for i in range(len(d.sources))
    }
    assert "draft-head" in sources  # its scored drafts won some queries


@pytest.mark.parametrize("rule", ["inverse-cdf", "gumbel"])
@pytest.mark.parametrize("batch", [1, 16])
def test_head_trees_change_no_token_and_under_the_gumbel_rule_keep_more_than_chains(
    trained, qwen2_dir, rule, batch
):
    """Trees of the head's ranked candidates, verified under batch-invariant numerics: plain's tokens
    and log-probabilities to the bit; under the gumbel rule (whose runners-up are the race's, the
    tokens the target's noise favours next) more tokens a forward than chains of the same depth."""
    from specroll.drafting.draft_tree import TreeShape

    directory, *_ = trained
    plain = rollout(qwen2_dir, workload(), max_batch_size=batch, sampling_rule=rule)
    embedding = rollout.last_engine.input_embeddings()
    lengths = {}
    for name, tree, budget in (("chain", None, 3), ("tree", TreeShape(depth=3, width=3, beam=3), 12)):
        drafter = DraftHeadDrafter.from_dir(directory, embedding, seed=7, rule=rule, tree=tree)
        spec = rollout(
            qwen2_dir,
            workload(),
            drafter,
            FixedDraftLength(budget),
            max_batch_size=batch,
            sampling_rule=rule,
            max_draft=budget,
        )
        assert_same_rollout(plain, spec)
        lengths[name] = rollout.last_engine.telemetry.mean_acceptance_length
    if rule == "gumbel":
        assert lengths["tree"] > lengths["chain"], lengths


def test_the_head_drafts_trees_where_auto_asks_and_chains_where_it_does_not(trained, qwen2_dir):
    """`draft-head`'s trees on request: auto, on prices where width is free at batch 1, asks for trees
    (after chains in its warm-up); both kinds verify and keep plain's tokens to the bit."""
    from specroll.drafting.draft_tree import TreeShape
    from specroll.policies.auto import AutoPolicy
    from specroll.policies.cost_model import CostModel

    directory, *_ = trained
    plain = rollout(qwen2_dir, workload(), max_batch_size=1)
    embedding = rollout.last_engine.input_embeddings()
    drafter = DraftHeadDrafter.from_dir(
        directory, embedding, seed=7, tree=TreeShape(3, 3, 3), on_request=True
    )
    free_width = CostModel(c_base=0.05, c_tok=1e-3, prices=[(1, 1, 1.0), (1, 9, 0.05 / 0.059)])
    spec = rollout(qwen2_dir, workload(), drafter, AutoPolicy(free_width), max_batch_size=1, max_draft=8)
    assert_same_rollout(plain, spec)
    forwards = [f for f in rollout.last_engine.telemetry.decode_forwards if f.num_drafted]
    trees = [f for f in forwards if f.tree]
    assert trees and len(trees) < len(forwards)  # both kinds ran
    assert sum(f.num_accepted for f in trees) > 0
    assert any(f.num_drafted > 3 for f in trees)  # wider than the head's three-deep chains could be


@pytest.mark.parametrize("tree, budget", [(None, 3), ((3, 3, 3), 9)])
def test_a_replay_of_the_rollout_gives_the_engines_tokens_a_forward(trained, qwen2_dir, tree, budget):
    """Replaying the rollout's responses through the head (teacher-forced states, no verification)
    keeps, forward by forward, what the engine's verification kept: the same tokens a forward."""
    from specroll.drafting.draft_tree import TreeShape
    from specroll.head.head_replay import ReplayedResponse, replay

    directory, *_ = trained
    shape = TreeShape(*tree) if tree else None
    rollout(qwen2_dir, workload(), sampling_rule="gumbel")
    embedding = rollout.last_engine.input_embeddings()
    drafter = DraftHeadDrafter.from_dir(directory, embedding, seed=7, rule="gumbel", tree=shape)
    done = rollout(
        qwen2_dir, workload(), drafter, FixedDraftLength(budget), sampling_rule="gumbel", max_draft=budget
    )
    engine_rate = rollout.last_engine.telemetry.mean_acceptance_length
    runner = ModelRunner.from_pretrained(qwen2_dir, 8, 96, batch_invariant=True)
    prompts, outputs = [r.prompt_token_ids for r in done], [r.output_token_ids for r in done]
    responses = [
        ReplayedResponse(r.request_id, tuple(p), tuple(o), s, r.params.max_tokens)
        for r, p, o, s in zip(done, prompts, outputs, teacher_forced(runner, prompts, outputs))
    ]
    fresh = DraftHeadDrafter.from_dir(directory, _embedding(runner), seed=7, rule="gumbel", tree=shape)
    replayed = replay(fresh, responses, budget)
    assert replayed.rows == sum(f.batch_size for f in rollout.last_engine.telemetry.decode_forwards)
    assert replayed.tokens_per_forward == engine_rate > 1.3


def test_a_tree_drafter_prices_its_nodes_by_timing_whole_trees_and_leaves_no_state(trained, qwen2_dir):
    from specroll.drafting.draft_tree import TreeShape

    directory, *_ = trained
    runner = ModelRunner.from_pretrained(qwen2_dir, 2, 32)
    drafter = DraftHeadDrafter.from_dir(directory, _embedding(runner), tree=TreeShape())
    grown = []
    propose = drafter._propose_trees
    drafter._propose_trees = lambda queries, ready: grown.append(propose(queries, ready)) or grown[-1]
    intercept, slope = drafter.draft_cost()
    assert intercept >= 0 and slope >= 0 and intercept + slope > 0
    assert {len(draft.token_ids) for drafts in grown for draft in drafts} == {16}  # whole trees were timed
    assert {len(drafts) for drafts in grown} == {1, 32} and drafter.states == {}
