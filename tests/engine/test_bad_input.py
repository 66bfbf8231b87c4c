"""Each bad input gets a clear error naming the problem; one bad request never takes down the others."""

from __future__ import annotations

import json

import pytest
import torch

from specroll.engine.engine import add_requests
from specroll.engine.request import Request, SamplingParams
from specroll.model.loader import load_model

from helpers import make_engine, workload


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(max_tokens=0), "max_tokens"),
        (dict(max_tokens=-3), "max_tokens"),
        (dict(temperature=-0.1), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
    ],
)
def test_bad_sampling_params(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize(
    "prompt, message",
    [
        ((), "empty prompt"),
        ((5, 97, 3), "outside the vocabulary"),
        ((5, -1), "outside the vocabulary"),
        (tuple(range(2, 92)), "exceeds the context"),
    ],
)
def test_bad_request_is_refused_and_others_finish(qwen2_dir, prompt, message):
    engine = make_engine(qwen2_dir)
    good = workload(num_prompts=2, n=2)
    bad = Request(99, 99, 0, prompt, SamplingParams(max_tokens=10))
    errors = add_requests(engine, [good[0], bad, *good[1:]])
    assert list(errors) == [99] and message in errors[99]
    assert bad.finish_reason == "error"
    engine.run()
    assert all(r.is_finished and r.num_output_tokens > 0 for r in good)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "nowhere")


def test_checkpoint_without_weights(tmp_path, qwen2_dir):
    (tmp_path / "config.json").write_text((qwen2_dir / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        load_model(tmp_path)


def test_pickled_weights_are_refused(tmp_path, qwen2_dir):
    (tmp_path / "config.json").write_text((qwen2_dir / "config.json").read_text())
    torch.save({"w": torch.zeros(1)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pickled"):
        load_model(tmp_path)


def test_corrupt_weights(tmp_path, qwen2_dir):
    (tmp_path / "config.json").write_text((qwen2_dir / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(ValueError, match="cannot read model.safetensors"):
        load_model(tmp_path)


def test_corrupt_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model(tmp_path)


def test_unsupported_architecture(tmp_path, qwen2_dir):
    config = json.loads((qwen2_dir / "config.json").read_text())
    config["model_type"] = "gpt2"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="unsupported model_type 'gpt2'"):
        load_model(tmp_path)


def test_weight_shape_mismatch(tmp_path, qwen2_dir):
    config = json.loads((qwen2_dir / "config.json").read_text())
    config["intermediate_size"] = 64
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes((qwen2_dir / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="has shape"):
        load_model(tmp_path)


def test_failing_drafter_costs_speed_not_output(qwen2_dir):
    from specroll.drafting.protocol import BaseDrafter
    from specroll.policies.fixed import FixedDraftLength

    class Broken(BaseDrafter):
        def propose(self, queries):
            raise RuntimeError("drafter bug")

    from helpers import assert_same_rollout, rollout

    plain = rollout(qwen2_dir, workload(num_prompts=2))
    broken = rollout(qwen2_dir, workload(num_prompts=2), Broken(), FixedDraftLength(3))
    assert_same_rollout(plain, broken)
    assert sum(f.num_drafted for f in rollout.last_engine.telemetry.decode_forwards) == 0
