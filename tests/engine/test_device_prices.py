"""A profile prices forwards only on the device type it was measured on: a rollout passes over a found
profile of another device, refuses one it is given, and an engine off the CPU without a profile of
its own device measures its prices there. A "cuda" rollout is a config value here: nothing runs on a
GPU; the measuring itself runs on a CPU runner."""

from __future__ import annotations

import re

import pytest

from specroll.engine import choices
from specroll.drafting.protocol import BaseDrafter
from specroll.engine import factory
from specroll.engine.device_prices import measure_device_prices, needs_device_profile
from specroll.engine.spec import EngineSpec
from specroll.engine_config import EngineConfig
from specroll.model.runner import ModelRunner
from specroll.policies.cost_model import CostModel
from specroll.rollout import RolloutConfig, cost_model_path, load_cost_model

CPU_FIT = CostModel(c_base=1e-3, c_tok=1e-4, device="cpu")
CUDA_FIT = CostModel(c_base=1e-5, c_tok=1e-7, device="cuda")


def config_on(device: str, **fields) -> RolloutConfig:
    return RolloutConfig(engine=engine_on(device), **fields)


def engine_on(device: str) -> EngineConfig:
    return EngineConfig(device=device, batch_invariant=device == "cpu")


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """./profiles (the working directory's) and the checkout's, both empty, for a model named tiny."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(choices, "PROFILES", tmp_path / "checkout-profiles")
    return tmp_path / "profiles", tmp_path / "checkout-profiles", tmp_path / "tiny"


def test_a_found_profile_is_used_on_its_own_device_only(profiles):
    here, _, model_dir = profiles
    CPU_FIT.save(here / "tiny.cost.json")
    assert cost_model_path(config_on("cpu", model_dir=model_dir)) == (here / "tiny.cost.json").resolve()
    assert cost_model_path(config_on("cuda", model_dir=model_dir)) is None
    assert load_cost_model(config_on("cuda", model_dir=model_dir)) is None  # bench predicts nothing


def test_a_profile_of_another_device_is_passed_over_for_the_next_place(profiles):
    here, checkout, model_dir = profiles
    CPU_FIT.save(here / "tiny.cost.json")
    CUDA_FIT.save(checkout / "tiny.cost.json")
    assert cost_model_path(config_on("cuda", model_dir=model_dir)) == (checkout / "tiny.cost.json").resolve()
    assert load_cost_model(config_on("cuda", model_dir=model_dir)) == CUDA_FIT
    assert load_cost_model(config_on("cpu", model_dir=model_dir)) == CPU_FIT


def test_a_profile_of_the_engines_dtype_comes_first_and_one_of_another_is_passed_over(profiles):
    """A bf16 forward's prices are not an fp32 one's: profiles/<model>.<dtype>.cost.json first; a fit
    that recorded another dtype is passed over; one that recorded none (older fits) serves any."""
    here, checkout, model_dir = profiles
    from dataclasses import replace

    unrecorded, bf16 = CPU_FIT, replace(CPU_FIT, c_base=5e-4, dtype="bfloat16")
    unrecorded.save(here / "tiny.cost.json")
    bf16.save(checkout / "tiny.bfloat16.cost.json")

    def on(dtype: str) -> RolloutConfig:
        return RolloutConfig(model_dir=model_dir, engine=EngineConfig(dtype=dtype))

    assert load_cost_model(on("bfloat16")) == bf16
    assert load_cost_model(on("float32")) == unrecorded
    replace(CPU_FIT, dtype="bfloat16").save(here / "tiny.cost.json")  # now recorded: bf16's only
    assert cost_model_path(on("float32")) is None


def test_a_given_profile_of_another_device_is_refused_by_name(tmp_path):
    path = tmp_path / "fit.cost.json"
    CPU_FIT.save(path)
    config = config_on("cuda", model_dir=tmp_path / "tiny", cost_model=path, speculate="off")
    message = re.escape(f"cost model {path} was measured on cpu, but this rollout runs on cuda")
    with pytest.raises(ValueError, match=message):
        cost_model_path(config)
    with pytest.raises(ValueError, match=message):
        config.engine_spec()
    spec = EngineSpec(tmp_path, 8, engine_on("cuda"), cost_model=path)
    with pytest.raises(ValueError, match=message):  # an engine refuses it too, whoever built the spec
        factory.policy_cost_model(spec)
    assert cost_model_path(config_on("cpu", model_dir=tmp_path / "tiny", cost_model=path)) == path


@pytest.mark.parametrize(
    "device, cost_model, is_speculating, expected",
    [
        ("cuda", None, True, True),
        ("cuda", CUDA_FIT, True, False),  # its own profile
        ("cuda", None, False, False),  # without drafts the policy prices nothing
        ("cpu", None, True, False),  # the policies' default prices are the CPU's
    ],
)
def test_an_engine_measures_its_prices_off_the_cpu_without_a_profile(
    device, cost_model, is_speculating, expected
):
    assert needs_device_profile(device, cost_model, is_speculating) is expected


def test_measured_prices_are_the_runners_device(qwen2_dir, one_thread, capsys):
    runner = ModelRunner.from_pretrained(qwen2_dir, num_slots=4, capacity=40)
    model = measure_device_prices(runner, max_draft=2, model_name="tiny")
    assert model.device == "cpu" and model.c_base + model.c_tok > 0 and model.fit_error is not None
    assert min(model.c_base, model.c_tok, model.c_ctx, model.c_row, model.c_row_ctx) >= 0
    assert not model.has_draft_model
    line = capsys.readouterr().err.strip()
    assert line.startswith("specroll: no cpu cost profile for tiny: measuring prices on the cpu")
    assert "`specroll profile --model tiny --device cpu`" in line and "\n" not in line


@pytest.mark.parametrize(
    "device, drafter, has_profile, measures",
    [
        ("cuda", "prompt-lookup", False, True),
        ("cuda", "prompt-lookup", True, False),
        ("cuda", None, False, False),
        ("cpu", "prompt-lookup", False, False),
    ],
)
def test_the_engine_measures_exactly_when_its_device_has_no_profile(
    qwen2_dir, tmp_path, monkeypatch, device, drafter, has_profile, measures
):
    """The engine's cost model on a CPU runner standing in for the spec's device."""
    calls = []
    monkeypatch.setattr(factory, "measure_device_prices", lambda *args: calls.append(args) or CUDA_FIT)
    path = None
    if has_profile:
        path = tmp_path / "fit.cost.json"
        CostModel(c_base=2e-5, c_tok=3e-7, device=device).save(path)
    spec = EngineSpec(qwen2_dir, 8, engine_on(device), drafter=drafter, cost_model=path)
    runner = ModelRunner.from_pretrained(qwen2_dir, num_slots=2, capacity=24)
    drafter_object = BaseDrafter() if drafter else None  # the contract's defaults: no cost of its own
    cost_model = factory.engine_cost_model(spec, runner, drafter_object)
    assert len(calls) == int(measures)
    if measures:
        assert calls[0] == (runner, spec.engine.max_draft, qwen2_dir.name) and cost_model is CUDA_FIT
    elif has_profile:
        assert cost_model == CostModel(c_base=2e-5, c_tok=3e-7, device=device)
    else:
        assert cost_model is None  # the policy's default, on the CPU or for no drafts
