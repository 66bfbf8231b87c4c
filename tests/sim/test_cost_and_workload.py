"""Cost model calibration, workload and acceptance sampling and fitting."""

import json

import numpy as np
import pytest

from specroll.sim.acceptance_rates import DrafterProfile
from specroll.policies.cost_model import CostModel
from specroll.policies.policy_names import fixed_draft_length
from specroll.policies.speculation_math import expected_tokens
from specroll.policies.profile_grid import ProfileGrid
from specroll.sim.roofline import prefill_seconds
from specroll.sim.profiled_cost import ProfiledCost, forward_seconds_per_row, profile_forward_cost
from specroll.sim.presets import PRESETS, get_preset
from specroll.sim.workload import LengthDistribution, Workload


def test_calibration_point_13ms_qwen32b_tp4_h100():
    cost = get_preset("DAPO-32B-20K").target_cost()
    assert cost.forward_seconds(1, 1, 0) == pytest.approx(0.013, rel=1e-9)


def test_roofline_grows_with_batch_tokens_and_context():
    cost = get_preset("DAPO-32B-20K").target_cost()
    assert cost.forward_seconds(256, 1, 0) > cost.forward_seconds(1, 1, 0)
    assert cost.forward_seconds(256, 5, 0) > cost.forward_seconds(256, 1, 0)
    assert cost.forward_seconds(1, 1, 500_000) > cost.forward_seconds(1, 1, 0)


def test_kv_read_does_not_hide_verification_compute():
    """SpecActor §3 (Fig. 5b): at batch 128 a 5-token verification costs well above a decode, even at
    a long context where the KV read dominates the decode."""
    cost = get_preset("DAPO-32B-20K").target_cost()
    context = 128 * 6000
    decode, verify = cost.forward_seconds(128, 1, context), cost.forward_seconds(128, 5, context)
    attention = context * cost.model.kv_bytes_per_token / (4 * cost.gpu.bandwidth * cost.bandwidth_efficiency)
    assert verify - decode > 0.010
    assert verify == pytest.approx(cost.forward_seconds(128, 5, 0) + attention, rel=1e-9)


def test_a_profile_loads_as_a_worker_cost(tmp_path):
    """`specroll profile` output (CostModel JSON) is the simulator's per-worker cost: per-row context
    is the batch's total over its rows, a prefill forward pads its rows to the longest, at half its length."""
    path = tmp_path / "fit.cost.json"
    CostModel(c_base=0.01, c_tok=1e-5, c_ctx=1e-9, c_row=2e-6, c_row_ctx=3e-9).save(path)
    cost = ProfiledCost(CostModel.load(path), kv_capacity_tokens=1e6)
    # b = 10 rows of 2 tokens, 1000 cached positions in total: 100 per row
    assert cost.forward_seconds(10, 2, 1000) == pytest.approx(
        0.01 + 10 * 2e-6 + 10 * 100 * 3e-9 + 20 * 1e-5 + 20 * 100 * 1e-9
    )
    one_row = 2e-6 + 200 * 3e-9 + 400 * 1e-5 + 400 * 200 * 1e-9  # 400 tokens at a mean context of 200
    assert prefill_seconds(cost, [400]) == pytest.approx(0.01 + one_row)
    # two prompts prefilled together: one forward, both rows padded to the longer
    assert prefill_seconds(cost, [100, 400]) == pytest.approx(0.01 + 2 * one_row)
    assert prefill_seconds(cost, []) == 0.0
    assert cost.kv_capacity_tokens == 1e6 and not cost.model.has_draft_model


def test_the_two_context_units_meet_in_one_place():
    """A CostModel takes one row's context, a ForwardCost the batch's: `forward_seconds_per_row` asks a
    ForwardCost in the CostModel's unit, and a profile fitted to a worker that runs a CostModel is it."""
    model = CostModel(c_base=0.01, c_tok=1e-5, c_ctx=1e-9, c_row=2e-6, c_row_ctx=3e-9)
    worker = ProfiledCost(model)
    assert forward_seconds_per_row(worker, 8, 3, 500.0) == pytest.approx(model.forward_seconds(8, 3, 500.0))
    refit = profile_forward_cost(worker, ProfileGrid.standard(16, 4, (64, 512)))
    for name in ("c_base", "c_tok", "c_ctx", "c_row", "c_row_ctx"):
        assert getattr(refit, name) == pytest.approx(getattr(model, name), rel=1e-6, abs=1e-15)


def test_lengths_are_clipped_and_fit_recovers_parameters():
    dist = LengthDistribution(2000, 0.7, 0.3, 100_000)
    lengths = dist.sample(2000, 16, np.random.default_rng(0))
    assert lengths.max() <= 100_000 and lengths.min() >= 16
    fitted = LengthDistribution.fit(lengths, 100_000)
    assert fitted.median_tokens == pytest.approx(2000, rel=0.1)
    assert fitted.group_sigma == pytest.approx(0.7, rel=0.1)
    assert fitted.within_group_sigma == pytest.approx(0.3, rel=0.1)


def test_trace_round_trip(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"prompt_tokens": 10, "max_tokens": 100, "groups": [[5, 6], [70]]}))
    workload = Workload.from_trace(path)
    assert workload.output_lengths.tolist() == [5, 6, 70] and workload.group_ids.tolist() == [0, 0, 1]


def test_acceptance_fit_recovers_mean():
    profile = DrafterProfile("d", 0.6, 8.0)
    rates = profile.sample(20_000, np.random.default_rng(0))
    fitted = DrafterProfile.fit("d", rates * 1000, np.full(20_000, 1000))
    assert fitted.mean_acceptance == pytest.approx(0.6, abs=0.01)
    assert fitted.concentration == pytest.approx(8.0, rel=0.1)


def test_every_preset_cites_its_sources():
    for preset in PRESETS.values():
        assert preset.sources, preset.name
        assert all(text for text in preset.sources.values())


def test_coupled_speculation_gains_little_at_batch_256():
    """SpecActor §3 (Fig. 5b) and §5.5: vanilla k=4 speculation with the 0.5B drafter (same TP4 GPUs)
    gains next to nothing per output token at the DAPO-32B-20K initial batch of 256."""
    from specroll.sim.systems import SYSTEMS, _draft_cost, _representative_context

    preset = get_preset("DAPO-32B-20K")
    target, draft = preset.target_cost(), _draft_cost(preset, 0, preset.gpus_per_worker)
    batch, context = 256, 256 * _representative_context(preset)
    alpha = preset.acceptance.drafters[0].mean_acceptance
    k = fixed_draft_length(SYSTEMS["vanilla-spec"].speculation)
    tokens = expected_tokens(alpha, k)
    speculative = (
        target.forward_seconds(batch, k + 1, context) + k * draft.forward_seconds(batch, 1, context)
    ) / tokens
    assert 0.9 < target.forward_seconds(batch, 1, context) / speculative < 1.1
