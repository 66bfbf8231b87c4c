"""GRPO through the engine on the bundled policy: speculation changes no reward and no weight, the
engine runs the trainer's weights after every step, and the CLI writes what it promises."""

from __future__ import annotations

import json

import pytest
import torch

from specroll.cli import main
from specroll.rollout import RolloutConfig
from specroll.engine_config import EngineConfig
from specroll.train.grpo_config import GRPOConfig
from specroll.train.trainer import GRPOTrainer

SMALL = dict(num_prompts=4, n=4, max_tokens=48, engine=EngineConfig(max_batch_size=16))


def _train(speculate: str, steps: int = 2, policy: str = "auto", **options):
    rollout = RolloutConfig(speculate=speculate, policy=policy, **SMALL)
    trainer = GRPOTrainer(GRPOConfig(rollout, steps=steps, lr=1e-3, **options))
    return trainer, trainer.run()


@pytest.mark.parametrize("drafter", ["on", "suffix"])
def test_speculation_changes_no_reward_and_no_weight(drafter):
    _, plain = _train("off")
    # a fixed draft cap: this tests the trainer's integration, not `auto`'s timing-priced choice (which
    # on a loaded machine may draft nothing in a step)
    _, spec = _train(drafter, policy="fixed-2")
    assert [m.weights_sha256 for m in spec] == [m.weights_sha256 for m in plain]
    assert [m.reward_mean for m in spec] == [m.reward_mean for m in plain]
    assert [m.output_tokens for m in spec] == [m.output_tokens for m in plain]
    # drafts were verified and accepted in every step
    assert all(m.mean_acceptance_length > 1.05 for m in spec)
    assert plain[0].weights_sha256 != plain[1].weights_sha256  # the weights moved
    if drafter == "suffix":
        assert spec[1].accepted_per_draft.get("history", 0) > 0  # step 1 drafts from step 0's responses


def test_the_engine_runs_the_trainers_weights_after_each_step():
    trainer, history = _train("suffix", steps=1, shadow_plain=True)
    engine_params = dict(trainer.engine.parts_for_testing().runner.model.named_parameters())
    for name, param in trainer.policy.named_parameters():
        assert torch.equal(engine_params[name], param.detach()), name
    assert history[0].same_as_plain is True and history[0].plain_rollout_seconds > 0


def test_load_weights_names_what_is_wrong():
    trainer, _ = _train("off", steps=1)
    weights = dict(trainer.policy.state_dict())
    weights.pop("model.norm.weight")
    with pytest.raises(ValueError, match="model.norm.weight"):
        trainer.engine.load_weights(weights)
    weights["model.norm.weight"] = torch.zeros(3)
    with pytest.raises(ValueError, match="wrong shape"):
        trainer.engine.load_weights(weights)


def test_train_command_writes_metrics_plot_and_a_loadable_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    flags = ["--num-prompts", "2", "--n", "4", "--max-tokens", "32", "--steps", "2", "--lr", "1e-3"]
    assert main(["train", *flags, "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for key in (
        "reward_mean",
        "rollout_s",
        "train_s",
        "output_tokens",
        "mean_acceptance_length",
        "weights_sha256",
    ):
        assert all(key in r for r in rows), key
    assert (out / "metrics.png").read_bytes().startswith(b"\x89PNG")
    assert (
        main(
            [
                "rollout",
                "--model",
                str(out / "checkpoint"),
                "--num-prompts",
                "1",
                "--n",
                "2",
                "--max-tokens",
                "8",
                "--no-progress",
                "--out",
                str(tmp_path / "r.jsonl"),
            ]
        )
        == 0
    )
    assert main(["train", "--steps", "0", "--out", str(out)]) == 2
    assert "steps must be >= 1" in capsys.readouterr().err
