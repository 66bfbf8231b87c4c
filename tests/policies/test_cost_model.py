import json
from pathlib import Path

import pytest

from specroll.policies.speculation_math import expected_tokens
from specroll.policies.cost_model import (
    DEFAULT_COST_MODEL,
    Affine,
    CostModel,
    LatencySample,
    check_profile_device,
    fit,
    fit_affine,
    mean_relative_error,
    speedup,
)
from specroll.policies.profile_grid import ProfileGrid, fit_on_grid

PROFILES = Path(__file__).resolve().parents[2] / "profiles"  # the committed ones


def test_expected_tokens_literals():
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25
    assert expected_tokens(1.0, 3) == 4.0
    assert expected_tokens(0.0, 8) == 1.0
    assert expected_tokens(0.9, 0) == pytest.approx(1.0)
    assert expected_tokens(0.8, 4) == pytest.approx(3.3616)  # 1 + .8 + .64 + .512 + .4096


def test_expected_tokens_broadcasts_over_arrays():
    import numpy as np

    table = expected_tokens(np.array([0.0, 0.5, 1.0])[:, None], np.arange(3)[None])  # (3 alphas, 3 k)
    assert table.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.5, 1.75], [1.0, 2.0, 3.0]]
    assert isinstance(expected_tokens(0.5, 2), float)


def test_forward_time_and_affine_views():
    model = CostModel(c_base=1.0, c_tok=0.1, c_ctx=0.001, draft_base=0.2, draft_row=0.01)
    assert model.forward_seconds(4, 3, 100) == pytest.approx(1.0 + 0.1 * 12 + 0.001 * 12 * 100)
    assert model.verify_affine(3, 100)(4) == pytest.approx(model.forward_seconds(4, 3, 100))
    assert model.draft_seconds(4, 2) == pytest.approx(2 * (0.2 + 0.04))
    assert model.step_seconds(4, 0) == model.forward_seconds(4, 1)


def test_speedup_literal():
    model = CostModel(c_base=1.0, c_tok=0.1)
    # k=1, alpha=0.5: 1.5 tokens in 1.2 s against 1 token in 1.1 s
    assert speedup(model, 0.5, 1, 1) == pytest.approx(1.5 * 1.1 / 1.2)


def test_fit_recovers_exact_coefficients():
    truth = CostModel(c_base=2e-3, c_tok=1e-4, c_ctx=5e-8)
    samples = [
        LatencySample(b, n, ctx, truth.forward_seconds(b, n, ctx))
        for b in (1, 2, 4, 8)
        for n in (1, 3, 5)
        for ctx in (64, 512)
    ]
    fitted = fit(samples)
    assert fitted.c_base == pytest.approx(2e-3, rel=1e-6)
    assert fitted.c_tok == pytest.approx(1e-4, rel=1e-6)
    assert fitted.c_ctx == pytest.approx(5e-8, rel=1e-6)
    assert fitted.fit_error == pytest.approx(0.0, abs=1e-9)


def test_fit_drops_a_negative_coefficient():
    # times fall with context: the context term would be negative, so it is dropped
    samples = [LatencySample(b, 1, ctx, 1.0 + 0.1 * b - 1e-4 * ctx) for b in (1, 2, 4) for ctx in (0, 100)]
    fitted = fit(samples)
    assert fitted.c_ctx == 0.0 and fitted.c_base > 0 and fitted.c_tok > 0
    assert mean_relative_error(fitted, samples) < 0.05


def test_fit_affine_literal():
    line = fit_affine([1, 2, 4], [0.3, 0.5, 0.9])
    assert line.intercept == pytest.approx(0.1) and line.slope == pytest.approx(0.2)


def test_save_and_load_round_trip(tmp_path):
    model = CostModel(1e-3, 2e-4, 3e-8, 4e-4, 5e-6, fit_error=0.12, source="test")
    model.save(tmp_path / "sub" / "m.cost.json")
    assert CostModel.load(tmp_path / "sub" / "m.cost.json") == model


def test_a_fit_records_its_device(tmp_path):
    model = CostModel(1e-3, 2e-4, device="cuda")
    model.save(tmp_path / "m.cost.json")
    assert json.loads((tmp_path / "m.cost.json").read_text())["device"] == "cuda"
    assert CostModel.load(tmp_path / "m.cost.json").device == "cuda"
    assert CostModel(1e-3, 2e-4).device == DEFAULT_COST_MODEL.device == "cpu"  # the in-code fits


def test_a_profile_saved_without_a_device_loads_as_a_cpu_one(tmp_path):
    """Every profile saved before fits recorded their device was measured on a CPU."""
    (tmp_path / "old.cost.json").write_text(json.dumps({"c_base": 1e-3, "c_tok": 2e-4, "source": "old"}))
    assert CostModel.load(tmp_path / "old.cost.json") == CostModel(1e-3, 2e-4, source="old", device="cpu")


def test_the_committed_profiles_say_which_device_they_priced():
    """A model's default profile (`<model>.cost.json`, what a CPU rollout loads) is a CPU's; another
    device's is named for it (`<model>-h100.cost.json`, device cuda), so no run prices by it unasked."""
    paths = sorted(PROFILES.glob("*.cost.json"))
    assert paths
    for path in paths:
        device = json.loads(path.read_text())["device"]
        assert device == ("cuda" if path.name.endswith("-h100.cost.json") else "cpu"), path


def test_a_profile_of_another_device_is_refused_naming_both_and_the_file():
    check_profile_device(CostModel(1e-3, 2e-4, device="cuda"), "cuda", "gpu.cost.json")  # its own: fine
    with pytest.raises(ValueError) as refused:
        check_profile_device(CostModel(1e-3, 2e-4), "cuda", "cpu.cost.json")
    message = str(refused.value)
    assert message.startswith("cost model cpu.cost.json was measured on cpu, but this rollout runs on cuda")
    assert "`specroll profile --model MODEL --device cuda`" in message


def test_validation():
    with pytest.raises(ValueError):
        CostModel(c_base=-1.0, c_tok=1.0)
    with pytest.raises(ValueError, match="device type it was measured on"):
        CostModel(c_base=1.0, c_tok=1.0, device="")
    with pytest.raises(ValueError):
        LatencySample(0, 1, 0, 1.0)
    with pytest.raises(ValueError):
        expected_tokens(1.5, 2)
    with pytest.raises(ValueError):
        Affine(1.0, -2.0)  # a latency never falls with the batch
    assert Affine(1.0, 2.0)(3) == 7.0


def test_fit_on_grid_times_every_point_in_order_and_recovers_the_model():
    """The one fit `specroll profile` and the simulator share: target forwards over the grid (context,
    then batch, then width), the draft model's one-token forwards at the shortest context for D(b)."""
    truth = CostModel(c_base=2e-3, c_tok=1e-4, c_ctx=5e-8, c_row=3e-5, draft_base=4e-4, draft_row=2e-5)
    grid = ProfileGrid((1, 2, 4), (1, 3), (0, 64))
    seen, drafted = [], []

    def draft(b, n, ctx):
        drafted.append((b, n, ctx))
        return truth.draft_seconds(b, n)

    model, samples = fit_on_grid(grid, truth.forward_seconds, draft, "literal", seen.append)
    assert [(s.batch_size, s.num_tokens, s.context_length) for s in samples] == [
        (b, n, ctx) for ctx in (0, 64) for b in (1, 2, 4) for n in (1, 3)
    ]
    assert seen == samples and drafted == [(1, 1, 0), (2, 1, 0), (4, 1, 0)]
    for name in ("c_base", "c_tok", "c_ctx", "c_row", "draft_base", "draft_row"):
        assert getattr(model, name) == pytest.approx(getattr(truth, name), rel=1e-6)
    assert model.source == "literal"
    assert not fit_on_grid(grid, truth.forward_seconds)[0].has_draft_model


def test_a_fit_whose_timings_favour_row_terms_still_has_a_per_forward_or_per_token_cost():
    from specroll.policies.cost_model import LatencySample, fit

    # seconds proportional to rows x context: an exact fit would use c_row_ctx alone
    samples = [LatencySample(b, t, c, 1e-4 * b * c) for b in (1, 2, 4) for t in (1, 3) for c in (4, 16)]
    model = fit(samples)
    assert model.c_base + model.c_tok > 0 and model.fit_error is not None
