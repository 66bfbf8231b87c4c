"""A head that fuses the target's intermediate layers (EAGLE-3): the target's forwards carry exactly
those layers' outputs beside the final hidden state, at every forward path, without changing a
logit; the engine asks for them from the drafter it is given; the head trains on them, and drafting
with it changes no token."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from specroll.drafting.combined import CombinedDrafter
from specroll.drafting.draft_head import DraftHeadDrafter
from specroll.drafting.registry import DrafterContext, make_drafter
from specroll.head.features import teacher_forced
from specroll.drafting.head_model import DraftHead, HeadConfig, default_feature_layers, load_head
from specroll.head.training import HeadTrainConfig
from specroll.head.warm_start import WarmStartConfig, warm_start
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.policies.fixed import FixedDraftLength

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from helpers import assert_same_rollout, rollout, workload  # noqa: E402

LAYERS = (0,)  # the tiny target has two decoder layers


def _sequences() -> list[SequenceInput]:
    return [SequenceInput(0, 0, [5, 17, 33, 40, 41], num_logits=3), SequenceInput(1, 0, [9, 8], num_logits=2)]


def test_the_features_carry_the_named_layers_outputs_and_the_logits_do_not_change(qwen2_dir):
    plain = ModelRunner.from_pretrained(qwen2_dir, 2, 32)
    fused = ModelRunner.from_pretrained(qwen2_dir, 2, 32)
    fused.use_feature_layers(LAYERS)
    outputs = {}
    fused.model.model.layers[0].register_forward_hook(lambda m, a, out: outputs.__setitem__("layer0", out))
    a, b = plain.forward(_sequences()), fused.forward(_sequences())
    H = plain.model.config.hidden_size
    assert a.hidden.shape[-1] == H and b.hidden.shape[-1] == 2 * H
    assert torch.equal(a.logits, b.logits)
    assert torch.equal(a.hidden, b.hidden[..., :H])
    layer0 = outputs["layer0"]  # (B, T, H): row 0's logit rows are its last 3 positions, row 1's its 2
    torch.testing.assert_close(b.hidden[0, :3, H:], layer0[0, 2:5], rtol=0, atol=0)
    torch.testing.assert_close(b.hidden[1, :2, H:], layer0[1, 0:2], rtol=0, atol=0)


def test_static_forwards_carry_the_same_features(qwen2_dir):
    dynamic = ModelRunner.from_pretrained(qwen2_dir, 2, 32, batch_invariant=True)
    static = ModelRunner.from_pretrained(qwen2_dir, 2, 32, batch_invariant=True)
    for runner in (dynamic, static):
        runner.use_feature_layers(LAYERS)
    static.use_static_forwards(max_width=5)
    prefill = [SequenceInput(0, 0, [5, 17, 33]), SequenceInput(1, 0, [9, 8])]
    step = [SequenceInput(0, 3, [40, 41], num_logits=2), SequenceInput(1, 2, [7], num_logits=1)]
    for runner in (dynamic, static):
        runner.forward(prefill)
    a, b = dynamic.forward(step), static.forward(step)
    assert torch.equal(a.hidden, b.hidden) and torch.equal(a.logits, b.logits)


def test_feature_layers_out_of_range_or_unordered_are_refused(qwen2_dir):
    runner = ModelRunner.from_pretrained(qwen2_dir, 1, 16)
    for layers in [(2,), (1, 0), (0, 0), (-1,)]:
        with pytest.raises(ValueError, match="feature layers"):
            runner.use_feature_layers(layers)
    with pytest.raises(ValueError, match=r"feature layers \[3, 1\] must be distinct, ascending"):
        HeadConfig(64, 100, 10, feature_layers=(3, 1))
    assert default_feature_layers(2) == () and default_feature_layers(30) == (1, 14)


def test_a_head_given_features_of_the_wrong_width_names_the_layers_it_reads():
    config = HeadConfig(8, 20, 10, intermediate_size=16, num_blocks=1, feature_layers=(0, 3))
    head = DraftHead(config, torch.arange(10))
    assert head.feature_width == 24
    assert head.first_feature(torch.randn(4, 24)).shape == (4, 8)
    with pytest.raises(ValueError, match=r"reads 24 feature columns .*layers \[0, 3\]"):
        head.first_feature(torch.randn(4, 8))


@pytest.fixture(scope="module")
def fused_head(qwen2_dir, tmp_path_factory):
    done = rollout(qwen2_dir, workload(num_prompts=8, n=4, max_tokens=40), max_model_len=64)
    runner = ModelRunner.from_pretrained(qwen2_dir, 8, 64)
    runner.use_feature_layers(LAYERS)
    sequences = teacher_forced(runner, [r.prompt_token_ids for r in done], [r.output_token_ids for r in done])
    train = HeadTrainConfig(window=16)
    before = warm_start(
        sequences,
        runner.model.model.embed_tokens.weight,
        runner.model.lm_head.weight,
        WarmStartConfig(seconds=0.0, draft_vocab_size=64, feature_layers=LAYERS, train=train),
    )
    after = warm_start(
        sequences,
        runner.model.model.embed_tokens.weight,
        runner.model.lm_head.weight,
        WarmStartConfig(seconds=600, max_epochs=30, draft_vocab_size=64, feature_layers=LAYERS, train=train),
    )
    return after.head.save(tmp_path_factory.mktemp("fused-head")), before, after


def test_a_fused_head_trains_saves_and_loads(fused_head):
    directory, before, after = fused_head
    assert after.head.config.feature_layers == LAYERS
    for b, a in zip(before.held_out.overlap, after.held_out.overlap):
        assert a > b + 0.1
    loaded = load_head(directory)
    assert loaded.config.feature_layers == LAYERS
    for name, value in after.head.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name


@pytest.mark.parametrize("rule", ["inverse-cdf", "gumbel"])
def test_drafting_with_a_fused_head_changes_no_token(fused_head, qwen2_dir, rule):
    directory, *_ = fused_head
    plain = rollout(qwen2_dir, workload(), max_batch_size=16, sampling_rule=rule)
    embedding = rollout.last_engine.input_embeddings()
    drafter = DraftHeadDrafter.from_dir(directory, embedding, seed=7, rule=rule)
    spec = rollout(qwen2_dir, workload(), drafter, FixedDraftLength(4), max_batch_size=16, sampling_rule=rule)
    assert_same_rollout(plain, spec)
    engine = rollout.last_engine
    assert (
        engine.parts_for_testing().runner.model.feature_layers == LAYERS
    )  # the engine asked the target for them
    assert engine.telemetry.mean_acceptance_length > 1.3


def test_combined_drafters_ask_for_their_heads_layers(fused_head, qwen2_dir):
    directory, *_ = fused_head
    runner = ModelRunner.from_pretrained(qwen2_dir, 2, 32)
    context = DrafterContext(vocab_size=runner.config.vocab_size, draft_head_dir=directory, target=runner)
    combined = make_drafter("head+suffix", context)
    assert isinstance(combined, CombinedDrafter) and combined.feature_layers == LAYERS
