"""A draft head born with the training run: its starting vocabulary, its silence until it has
trained, and GRPO that makes one for a target without a head, trains it from the first step and
leaves it behind, with the same weights as plain decoding."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from specroll.drafting.draft_head import DraftHeadDrafter
from specroll.drafting.head_model import load_head
from specroll.drafting.protocol import DraftQuery
from specroll.engine_config import EngineConfig
from specroll.head.born_online import born_online_head, starting_vocabulary
from specroll.head.shape import ONE_DRAFT
from specroll.model.runner import ModelRunner
from specroll.rollout import RolloutConfig
from specroll.train.grpo_config import GRPOConfig
from specroll.train.trainer import GRPOTrainer

SMALL = dict(num_prompts=4, n=4, max_tokens=48, engine=EngineConfig(max_batch_size=16))


def test_the_starting_vocabulary_takes_stop_tokens_then_prompt_tokens_by_count_then_low_ids():
    prompts = [[9, 7, 7, 30], [7, 9, 12]]  # 7 three times, 9 twice, 12 and 30 once
    assert starting_vocabulary(prompts, 6, 40, always=(35,)).tolist() == [0, 7, 9, 12, 30, 35]
    assert starting_vocabulary(prompts, 3, 40, always=(35,)).tolist() == [7, 9, 35]  # count order, cut
    assert starting_vocabulary([[99, 5]], 4, 40).tolist() == [0, 1, 2, 5]  # ids past the vocabulary dropped
    assert starting_vocabulary([], 100, 8).tolist() == list(range(8))  # never past the vocabulary


def _born_drafter(model_dir) -> DraftHeadDrafter:
    runner = ModelRunner.from_pretrained(model_dir, 2, 32)
    head = born_online_head(runner.lm_head_weight(), runner.model.config.num_layers, [[1, 2, 3]], ONE_DRAFT)
    return DraftHeadDrafter(head, runner.input_embeddings(), seed=3)


def test_a_held_head_drafts_nothing_until_weights_are_offered():
    drafter = _born_drafter(RolloutConfig().model_dir)
    state = torch.zeros(drafter.head.feature_width)
    drafter.states[5] = (state, 3)
    query = [DraftQuery(5, 0, [1, 2, 3], 1, 2)]
    assert len(drafter.propose(query)[0].token_ids) == 2  # a head drafts its budget
    drafter.hold_drafts()
    assert drafter.propose(query)[0].token_ids == []  # held: nothing
    drafter.offer_weights({k: v.clone() for k, v in drafter.head.state_dict().items()})
    assert len(drafter.propose(query)[0].token_ids) == 2 and not drafter.is_held  # trained weights: drafts


def test_grpo_with_an_online_head_and_no_head_of_the_targets_makes_one_and_trains_it(tmp_path):
    plain = GRPOTrainer(GRPOConfig(RolloutConfig(speculate="off", **SMALL), steps=3, lr=1e-3)).run()
    config = GRPOConfig(RolloutConfig(policy="fixed-2", **SMALL), steps=3, lr=1e-3, online_head=True)
    trainer = GRPOTrainer(replace(config, head_between_steps=4), head_dir=tmp_path / "head")
    born = {k: v.clone() for k, v in load_head(tmp_path / "head").state_dict().items()}
    assert trainer.config.rollout.speculate == "head+suffix"  # the suffix drafters draft while it learns
    assert trainer.config.rollout.draft_head_dir == tmp_path / "head"
    online = trainer.run()
    saved = trainer.online_head.save(tmp_path / "head")
    trainer.close()
    assert [m.weights_sha256 for m in online] == [m.weights_sha256 for m in plain]
    assert [m.head_updates for m in online] == [4, 8, 12]
    assert [m.head_swaps for m in online] == [0, 1, 2]  # held through step 0: nothing to swap in yet
    trained = load_head(saved).state_dict()
    assert torch.equal(trained["draft_to_target"], born["draft_to_target"])
    assert not torch.equal(trained["lm_head.weight"], born["lm_head.weight"])


def test_a_head_born_with_the_run_needs_a_directory_and_a_drafter_that_holds_a_head():
    with pytest.raises(ValueError, match="directory"):
        GRPOTrainer(GRPOConfig(RolloutConfig(**SMALL), steps=1, online_head=True))
    with pytest.raises(ValueError, match="draft-head"):  # suffix drafters alone hold no head
        GRPOTrainer(GRPOConfig(RolloutConfig(speculate="suffix", **SMALL), online_head=True), head_dir=None)


def test_the_train_command_leaves_the_head_it_trained_in_the_run_directory(tmp_path, capsys):
    from specroll.cli import main

    out = tmp_path / "run"
    flags = ["--num-prompts", "2", "--n", "4", "--max-tokens", "24", "--policy", "fixed-1"]
    assert (
        main(
            ["train", *flags, "--steps", "2", "--online-head", "--head-between-steps", "2", "--out", str(out)]
        )
        == 0
    )
    assert f"--draft-head {out / 'draft-head'}" in capsys.readouterr().out
    head = load_head(out / "draft-head")  # a head `--draft-head` loads
    assert head.config.train_depth == ONE_DRAFT.depth


def test_offered_weights_are_taken_in_with_the_next_features_though_no_draft_is_asked():
    """A policy that asks a held head for nothing (plain decoding at a batch where drafts do not pay)
    still gets it trained: the weights are swapped in between two forwards, not only at a proposal."""
    from specroll.drafting.protocol import TargetFeatures

    drafter = _born_drafter(RolloutConfig().model_dir)
    drafter.hold_drafts()
    drafter.offer_weights({k: v.clone() for k, v in drafter.head.state_dict().items()})
    assert drafter.num_swaps == 0 and drafter.is_held
    hidden = torch.zeros(1, drafter.head.feature_width)
    drafter.observe_features(TargetFeatures((5,), hidden, (1,), (4,), ((7, 8),)))
    assert drafter.num_swaps == 1 and not drafter.is_held
