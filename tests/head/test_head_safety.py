"""A new user's path through the draft head: nothing a user made is overwritten, and data from another
run is refused by name (on the bundled policy and its draft model, which share a vocabulary)."""

from __future__ import annotations

import json

import pytest

from specroll.cli import main
from specroll.drafting.head_files import read_head_config
from specroll.rollout import DEFAULT_DRAFT_MODEL

WORKLOAD = ["--num-prompts", "2", "--n", "2", "--max-tokens", "24", "--seed", "3"]
TRAIN = ["--minutes", "0.02", "--draft-vocab", "32", "--no-progress"]


@pytest.fixture
def rollout(tmp_path):
    path = tmp_path / "rollout.jsonl"
    assert main(["rollout", *WORKLOAD, "--speculate", "off", "--out", str(path), "--no-progress"]) == 0
    return path


def _train(rollout, *flags) -> int:
    return main(["head", "train", *WORKLOAD, "--rollouts", str(rollout), *TRAIN, *flags])


def test_a_trained_head_is_never_replaced_without_force_and_then_kept_aside(rollout, tmp_path, capsys):
    head = tmp_path / "head"
    assert _train(rollout, "--out", str(head)) == 0
    first = (head / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert _train(rollout, "--out", str(head), "--seed", "3") == 2
    err = capsys.readouterr().err
    assert "specroll head train: error:" in err and "already holds a trained head" in err
    assert (head / "model.safetensors").read_bytes() == first  # untouched
    assert _train(rollout, "--out", str(head), "--force") == 0
    assert f"kept in {tmp_path / 'head.previous'}" in capsys.readouterr().out
    assert (tmp_path / "head.previous" / "model.safetensors").read_bytes() == first
    assert read_head_config(head) is not None
    assert _train(rollout, "--out", str(head), "--force") == 0
    assert (tmp_path / "head.previous-2").is_dir()  # a second replacement keeps both


def test_head_train_saves_where_draft_head_says_and_refuses_a_budget_of_nothing(rollout, tmp_path, capsys):
    target = tmp_path / "named"
    assert _train(rollout, "--draft-head", str(target)) == 0
    assert read_head_config(target) is not None
    assert _train(rollout, "--out", str(tmp_path / "a"), "--draft-head", str(tmp_path / "b")) == 2
    assert "name two places" in capsys.readouterr().err
    code = main(["head", "train", *WORKLOAD, "--rollouts", str(rollout), "--minutes", "0"])
    assert code == 2 and "--minutes must be positive" in capsys.readouterr().err


def test_a_rollout_of_another_model_or_workload_is_refused_by_name(tmp_path, capsys):
    other = tmp_path / "other-model.jsonl"
    flags = ["--model", str(DEFAULT_DRAFT_MODEL), "--speculate", "off", "--out", str(other), "--no-progress"]
    assert main(["rollout", *WORKLOAD, *flags]) == 0
    assert _train(other, "--out", str(tmp_path / "h")) == 2
    err = capsys.readouterr().err
    assert "its model is draft with other weights than policy's (--model)" in err
    assert read_head_config(tmp_path / "h") is None

    ours = tmp_path / "ours.jsonl"
    assert main(["rollout", *WORKLOAD, "--speculate", "off", "--out", str(ours), "--no-progress"]) == 0
    assert _train(ours, "--out", str(tmp_path / "h")) == 0
    replay = ["head", "replay", *WORKLOAD, "--rollouts", str(ours), "--head", str(tmp_path / "h")]
    assert main([*replay, "--max-tokens", "32", "--sampling-rule", "gumbel", "--trees", "4"]) == 2
    err = capsys.readouterr().err
    assert (
        "max_tokens 24 here 32 (--max-tokens)" in err and "sampling_rule 'inverse-cdf' here 'gumbel'" in err
    )
    evaluate = ["head", "eval", *WORKLOAD, "--rollouts", str(ours), "--head", str(tmp_path / "h")]
    assert main([*evaluate, "--seed", "4"]) == 2
    assert "seed 3 here 4 (--seed)" in capsys.readouterr().err


def test_a_rollout_without_its_provenance_is_refused(tmp_path, capsys):
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"prompt_id": 0, "token_ids": [1, 2, 3]}) + "\n")
    assert _train(bare, "--out", str(tmp_path / "h")) == 2
    assert "bare.provenance.json beside it" in capsys.readouterr().err


def test_a_draft_head_flag_that_names_no_head_is_an_error(tmp_path, capsys):
    for command in (["rollout", "--out", str(tmp_path / "r.jsonl")], ["bench", "--systems", "plain"]):
        assert main([*command, *WORKLOAD, "--draft-head", str(tmp_path / "notahead")]) == 2
        assert f"--draft-head {tmp_path / 'notahead'} holds no draft head" in capsys.readouterr().err
