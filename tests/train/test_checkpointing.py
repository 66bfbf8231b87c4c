"""The training state on disk: bit-identical round trip, loadable policy, atomic writes, pruning."""

from __future__ import annotations

import json

import pytest
import torch

import specroll.train.checkpointing as checkpointing
from specroll.rollout import DEFAULT_MODEL, RolloutConfig
from specroll.engine_config import EngineConfig
from specroll.train.checkpointing import latest_state_dir, load_state, save_state
from specroll.train.recent_responses import FinishedResponse
from specroll.train.train_state import TrainState
from specroll.train.grpo_config import GRPOConfig
from specroll.train.policy_forward import PolicyForward, load_trainable, sequence_logprobs
from specroll.train.weights import weights_sha256

CONFIG = GRPOConfig(
    RolloutConfig(num_prompts=4, n=4, max_tokens=64, engine=EngineConfig(seed=3)), steps=4, lr=1e-3
)


@pytest.fixture(autouse=True)
def one_thread():
    """As the trainer runs the bundled policy (`apply_threads`): a tiny model's ops split over threads
    only wait on each other, seconds a step on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _trained(num_updates: int = 2):
    """The bundled policy after a few AdamW steps on an arbitrary loss: moments and step counts set."""
    torch.manual_seed(0)
    policy = load_trainable(DEFAULT_MODEL)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3, weight_decay=0.01)
    for _ in range(num_updates):
        _update(policy, optimizer)
    return policy, optimizer


def _update(policy, optimizer) -> None:
    optimizer.zero_grad()
    logprobs, _ = sequence_logprobs(PolicyForward(policy, EngineConfig()), [[1, 5, 9]], [[2, 7]], 1.0)
    logprobs.sum().backward()
    optimizer.step()


def _state(policy, optimizer, next_step: int = 2) -> TrainState:
    return TrainState(
        next_step,
        CONFIG,
        policy.state_dict(),
        optimizer.state_dict(),
        torch.get_rng_state(),
        weights_sha256(policy),
        "ab" * 32,
        [FinishedResponse(1, 40, 2, (5, 6, 1))],
    )


def test_a_state_comes_back_bit_identical_and_resumes_the_same_updates(tmp_path):
    policy, optimizer = _trained()
    saved = save_state(tmp_path, _state(policy, optimizer))
    assert saved == tmp_path / "train_state" / "step-000002" == latest_state_dir(tmp_path)
    state = load_state(saved)
    assert (state.next_step, state.config, state.initial_weights_sha256) == (2, CONFIG, "ab" * 32)
    assert state.recent_responses == [FinishedResponse(1, 40, 2, (5, 6, 1))]
    assert torch.equal(state.torch_rng, torch.get_rng_state())

    fresh = load_trainable(DEFAULT_MODEL)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-3, weight_decay=0.01)
    fresh.load_state_dict(state.policy, strict=False)
    fresh_optimizer.load_state_dict(state.optimizer)
    assert weights_sha256(fresh) == weights_sha256(policy) != weights_sha256(load_trainable(DEFAULT_MODEL))
    before, after = optimizer.state_dict(), fresh_optimizer.state_dict()
    assert before["param_groups"] == after["param_groups"]
    assert after["state"][0]["step"].item() == 2
    for index, named in before["state"].items():
        for name, value in named.items():
            assert torch.equal(after["state"][index][name], value), (index, name)
    _update(policy, optimizer)
    _update(fresh, fresh_optimizer)
    assert weights_sha256(fresh) == weights_sha256(policy)  # the moments carried: the next step is the same


def test_the_saved_policy_is_a_checkpoint_that_model_loads(tmp_path):
    policy, optimizer = _trained(1)
    saved = save_state(tmp_path, _state(policy, optimizer))
    files = {p.name for p in (saved / "policy").iterdir()}
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= files
    assert weights_sha256(load_trainable(saved / "policy")) == weights_sha256(policy)


def test_a_failed_write_leaves_the_previous_state_whole(tmp_path, monkeypatch):
    policy, optimizer = _trained(1)
    first = save_state(tmp_path, _state(policy, optimizer, next_step=1))
    _update(policy, optimizer)

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpointing, "_write_synced", fail)  # state.json, the last file written
    with pytest.raises(OSError, match="disk full"):
        save_state(tmp_path, _state(policy, optimizer, next_step=2))
    assert latest_state_dir(tmp_path) == first
    assert [p.name for p in (tmp_path / "train_state").iterdir()] == ["step-000001"]  # nothing partial left
    assert load_state(first).weights_sha256 != weights_sha256(policy)


def test_a_write_cut_short_by_a_kill_is_never_read_and_is_cleared_later(tmp_path):
    policy, optimizer = _trained(1)
    first = save_state(tmp_path, _state(policy, optimizer, next_step=1))
    killed = tmp_path / "train_state" / ".partial-step-000002-x1"  # what a kill before the rename leaves
    (killed / "policy").mkdir(parents=True)
    (killed / "state.json").write_text(json.dumps({"format": 1, "next_step": 2}))
    assert latest_state_dir(tmp_path) == first
    second = save_state(tmp_path, _state(policy, optimizer, next_step=2))
    assert [p.name for p in (tmp_path / "train_state").iterdir()] == [second.name]


def test_the_newest_states_are_kept_and_a_step_saved_again_is_replaced(tmp_path):
    policy, optimizer = _trained(1)
    for step in (1, 2, 3):
        save_state(tmp_path, _state(policy, optimizer, next_step=step), keep=2)
    assert sorted(p.name for p in (tmp_path / "train_state").iterdir()) == ["step-000002", "step-000003"]
    _update(policy, optimizer)
    again = save_state(tmp_path, _state(policy, optimizer, next_step=3), keep=2)
    assert load_state(again).weights_sha256 == weights_sha256(policy)
    assert sorted(p.name for p in (tmp_path / "train_state").iterdir()) == ["step-000002", "step-000003"]
    with pytest.raises(ValueError, match="keep"):
        save_state(tmp_path, _state(policy, optimizer), keep=0)


def test_a_state_of_another_format_is_refused(tmp_path):
    policy, optimizer = _trained(1)
    saved = save_state(tmp_path, _state(policy, optimizer))
    meta = json.loads((saved / "state.json").read_text())
    (saved / "state.json").write_text(json.dumps({**meta, "format": 99}))
    with pytest.raises(ValueError, match="format 99"):
        load_state(saved)
