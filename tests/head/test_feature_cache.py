"""Teacher-forced features kept on disk: what a cache serves, what it refuses, `head train` reusing one."""

from __future__ import annotations

import pytest
import torch

from specroll.cli import main
from specroll.head.feature_cache import FeatureSource, load_features, save_features
from specroll.head.features import FeatureSequence
from specroll.drafting.head_files import read_head_config

H = 4
SOURCE = FeatureSource("/models/policy [model.safetensors:10:1]", "ab" * 32, 1.0)


def _sequences(num_chunks: int) -> list[FeatureSequence]:
    gen = torch.Generator().manual_seed(0)
    return [
        FeatureSequence(
            torch.arange(n),
            torch.randn(n, H * num_chunks, generator=gen),
            torch.zeros(n, 2, dtype=torch.long),
            torch.full((n, 2), 0.5),
        )
        for n in (3, 5)
    ]


def test_a_cache_serves_the_final_state_and_any_of_its_layers_in_order(tmp_path):
    sequences = _sequences(3)  # final state, then layers 1 and 5
    path = tmp_path / "f.pt"
    save_features(path, sequences, SOURCE, [1, 5])
    for layers, chunks in [((1, 5), [0, 1, 2]), ((), [0]), ((5,), [0, 2])]:
        loaded = load_features(path, SOURCE, layers, H)
        for got, want in zip(loaded, sequences):
            expected = torch.cat([want.hidden[:, c * H : (c + 1) * H] for c in chunks], 1)
            assert torch.equal(got.hidden, expected)
            assert torch.equal(got.tokens, want.tokens) and torch.equal(got.top_probs, want.top_probs)


def test_a_cache_of_other_responses_or_without_a_layer_is_refused(tmp_path):
    path = tmp_path / "f.pt"
    save_features(path, _sequences(2), SOURCE, [1])
    other = FeatureSource(SOURCE.checkpoint, "cd" * 32, 1.0)
    with pytest.raises(ValueError, match="another sequences_sha256"):
        load_features(path, other, [1], H)
    with pytest.raises(ValueError, match=r"carries target layers \[1\], not \[2\]"):
        load_features(path, SOURCE, [1, 2], H)
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a specroll feature cache"):
        load_features(tmp_path / "other.pt", SOURCE, [], H)


WORKLOAD = ["--num-prompts", "2", "--n", "2", "--max-tokens", "24", "--seed", "3"]


def test_head_train_reuses_a_cache_for_a_head_with_fewer_layers(tmp_path, capsys):
    rollout = tmp_path / "rollout.jsonl"
    assert main(["rollout", *WORKLOAD, "--speculate", "off", "--out", str(rollout), "--no-progress"]) == 0
    cache = tmp_path / "features.pt"
    common = ["head", "train", *WORKLOAD, "--rollouts", str(rollout), "--minutes", "0.02"]
    common += ["--draft-vocab", "32", "--features-cache", str(cache), "--no-progress"]
    assert main([*common, "--feature-layers", "1", "--out", str(tmp_path / "fused")]) == 0
    assert "computed, kept in" in capsys.readouterr().out and cache.exists()
    assert main([*common, "--feature-layers", "none", "--out", str(tmp_path / "final")]) == 0
    assert f"read from {cache}" in capsys.readouterr().out
    assert read_head_config(tmp_path / "fused")["feature_layers"] == [1]
    assert read_head_config(tmp_path / "final")["feature_layers"] == []
    assert main([*common, "--feature-layers", "2", "--out", str(tmp_path / "other")]) == 2
    assert "not [2]" in capsys.readouterr().err


def test_a_checkpoint_saved_over_in_place_is_another_checkpoint(tmp_path):
    from specroll.head.feature_cache import checkpoint_fingerprint

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"1234")
    before = checkpoint_fingerprint(tmp_path)
    weights.write_bytes(b"123456")
    assert checkpoint_fingerprint(tmp_path) != before
