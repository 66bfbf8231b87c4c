"""Online head training: the rollout's recorded hidden states are the target's, the buffer stays
bounded, the spot trainer's weights reach the drafter between forwards, and GRPO with an online head
gives the same rewards and weights as without speculation."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from specroll.drafting.draft_head import DraftHeadDrafter
from specroll.engine_config import EngineConfig
from specroll.head.buffer import FeatureBuffer
from specroll.head.features import teacher_forced
from specroll.head.recorder import HiddenRecorder
from specroll.head.training import HeadTrainConfig
from specroll.head.warm_start import WarmStartConfig, warm_start
from specroll.model.runner import ModelRunner
from specroll.policies.fixed import FixedDraftLength
from specroll.rollout import RolloutConfig
from specroll.train.grpo_config import GRPOConfig
from specroll.train.trainer import GRPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from helpers import rollout, workload  # noqa: E402

SMALL = dict(num_prompts=4, n=4, max_tokens=48, engine=EngineConfig(max_batch_size=16))


def _head(model_dir, directory, epochs=20):
    """A head warm-started for `epochs` (0: untrained), bounded by epochs so that load cannot weaken it."""
    done = rollout(model_dir, workload(num_prompts=6, n=4, max_tokens=40), max_model_len=64)
    runner = ModelRunner.from_pretrained(model_dir, 8, 64)
    sequences = teacher_forced(runner, [r.prompt_token_ids for r in done], [r.output_token_ids for r in done])
    train = HeadTrainConfig(window=16)
    config = WarmStartConfig(seconds=600, max_epochs=epochs, draft_vocab_size=64, train=train)
    embedding = runner.model.model.embed_tokens.weight
    result = warm_start(sequences, embedding, runner.model.lm_head.weight, config)
    return result.head.save(directory), sequences


def test_the_recorder_keeps_each_requests_hidden_states_in_order(qwen2_dir, tmp_path):
    directory, _ = _head(qwen2_dir, tmp_path / "head")
    embedding = ModelRunner.from_pretrained(qwen2_dir, 1, 8).model.model.embed_tokens.weight
    drafter = DraftHeadDrafter.from_dir(directory, embedding, seed=7)
    recorder = HiddenRecorder()
    drafter.add_listener(recorder)
    done = rollout(qwen2_dir, workload(num_prompts=3, n=2), drafter, FixedDraftLength(3))
    runner = rollout.last_engine.parts_for_testing().runner
    recorded = recorder.take(runner.model.lm_head.weight)
    truth = teacher_forced(
        ModelRunner.from_pretrained(qwen2_dir, 8, 96),
        [r.prompt_token_ids for r in done],
        [r.output_token_ids for r in done],
    )
    for request, seq in zip(done, truth):
        got = recorded[request.request_id]
        n = got.num_positions  # the last token is never fed, so one position short
        assert n == seq.num_positions - 1
        assert torch.equal(got.tokens, seq.tokens[:n])
        torch.testing.assert_close(got.hidden, seq.hidden[:n], rtol=1e-4, atol=1e-4)
        assert torch.equal(got.top_ids[:, 0], seq.top_ids[:n, 0])
    assert recorder.num_positions == 0  # taken


def test_the_buffer_drops_the_oldest_steps_past_its_bound(qwen2_dir, tmp_path):
    _, sequences = _head(qwen2_dir, tmp_path / "head", epochs=0)
    size = sequences[0].num_positions
    buffer = FeatureBuffer(max_positions=3 * size)
    for step in range(5):
        buffer.add(step, [sequences[0]])
    assert buffer.num_positions == 3 * size and len(buffer) == 3
    batch = buffer.sample(HeadTrainConfig(window=16, windows_per_batch=4), random.Random(0))
    assert batch.tokens.shape == (4, 16)
    with pytest.raises(ValueError, match="positive"):
        FeatureBuffer(0)


def test_online_updates_unroll_as_deep_as_the_warm_start_did(qwen2_dir, tmp_path):
    from specroll.train.online_head import OnlineHead

    runner = ModelRunner.from_pretrained(qwen2_dir, 8, 64)
    done = rollout(qwen2_dir, workload(num_prompts=2, n=2, max_tokens=24), max_model_len=64)
    sequences = teacher_forced(runner, [r.prompt_token_ids for r in done], [r.output_token_ids for r in done])
    embedding = runner.model.model.embed_tokens.weight
    config = WarmStartConfig(seconds=0.0, draft_vocab_size=64, train=HeadTrainConfig(window=16, depth=1))
    head = warm_start(sequences, embedding, runner.model.lm_head.weight, config).head
    directory = head.save(tmp_path / "h")
    drafter = DraftHeadDrafter.from_dir(directory, embedding, seed=7)
    assert drafter.head.config.train_depth == 1  # saved with the head
    online = OnlineHead(drafter, runner.model.lm_head.weight, 1.0, 0.0, 1e-4, 0)
    assert online.spot.config.depth == 1
    online.spot.stop()


def _run_and_close(trainer: GRPOTrainer) -> list:
    """The run's metrics, the online head's trainer process stopped after it, however it ends."""
    try:
        return trainer.run()
    finally:
        trainer.close()


def test_grpo_with_an_online_head_between_steps_matches_plain_and_trains_only_there(tmp_path):
    model_dir = RolloutConfig().model_dir
    directory, _ = _head(model_dir, tmp_path / "head", epochs=0)
    plain = GRPOTrainer(GRPOConfig(RolloutConfig(speculate="off", **SMALL), steps=3, lr=1e-3)).run()
    config = RolloutConfig(speculate="draft-head", draft_head_dir=directory, policy="fixed-2", **SMALL)
    trainer = GRPOTrainer(GRPOConfig(config, steps=3, lr=1e-3, online_head=True, head_between_steps=4))
    online = _run_and_close(trainer)
    assert [m.weights_sha256 for m in online] == [m.weights_sha256 for m in plain]
    assert [m.head_updates for m in online] == [4, 8, 12]  # exactly N after each rollout
    assert [m.head_swaps for m in online] == [0, 1, 2]  # swapped in by the next rollout's first draft
    assert all(m.head_seconds > 0 for m in online)
    with pytest.raises(ValueError, match="online_head"):
        GRPOConfig(config, head_between_steps=4)


def test_grpo_with_an_online_head_matches_plain_rewards_and_weights(tmp_path):
    model_dir = RolloutConfig().model_dir
    directory, _ = _head(model_dir, tmp_path / "head", epochs=20)
    plain = GRPOTrainer(GRPOConfig(RolloutConfig(speculate="off", **SMALL), steps=4, lr=1e-3)).run()
    online = _run_and_close(
        GRPOTrainer(
            GRPOConfig(
                RolloutConfig(speculate="draft-head", draft_head_dir=directory, policy="fixed-2", **SMALL),
                steps=4,
                lr=1e-3,
                online_head=True,
                track_drift=True,
            )
        )
    )
    assert [m.weights_sha256 for m in online] == [m.weights_sha256 for m in plain]
    assert [m.reward_mean for m in online] == [m.reward_mean for m in plain]
    assert online[-1].head_updates > 0 and online[-1].head_swaps > 0
    assert online[0].head_positions > 0
    assert all(m.mean_acceptance_length > 1.0 for m in online)
    assert online[0].drift_kl == pytest.approx(0.0, abs=1e-5)  # step 0 rolls out the initial policy
    assert online[-1].drift_kl > online[0].drift_kl  # lr 1e-3 moves it


def test_a_draft_head_among_suffix_drafters_trains_online(tmp_path):
    """`head+suffix` (a combination holding a draft head) hands its head to the online trainer: the
    head's features are recorded, it is trained between steps, and its new weights are swapped in."""
    model_dir = RolloutConfig().model_dir
    directory, _ = _head(model_dir, tmp_path / "head", epochs=0)
    config = RolloutConfig(speculate="head+suffix", draft_head_dir=directory, policy="fixed-2", **SMALL)
    trainer = GRPOTrainer(GRPOConfig(config, steps=2, lr=1e-3, online_head=True, head_between_steps=2))
    head = trainer.engine.trainable_head()
    assert isinstance(head, DraftHeadDrafter)  # the combination's member
    online = trainer.run()
    trainer.close()
    assert online[0].head_positions > 0  # the combination gave its head the target's features
    assert [m.head_updates for m in online] == [2, 4]
    assert [m.head_swaps for m in online] == [0, 1] and head.num_swaps == 1


def test_online_training_needs_the_draft_head_drafter():
    with pytest.raises(ValueError, match="draft-head"):
        GRPOTrainer(GRPOConfig(RolloutConfig(speculate="suffix", **SMALL), online_head=True))
