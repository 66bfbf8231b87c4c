"""Seer §4.4's speculation thresholds from the worker's cost, per architecture (issue 38)."""

import pytest

from specroll.scheduling.adaptive_range import AdaptiveDraftRange, best_draft_len
from specroll.sim.presets import get_preset
from specroll.sim.systems import SYSTEMS, _seer_draft_range, _spec_costs, _topology


def dense(batch, k):
    """Memory-bound until b (k + 1) passes 64 tokens, compute-bound beyond."""
    return 0.010 + 0.0002 * max(batch * (k + 1) - 64, 0)


def moe(batch, k):
    """Every verified token at a small batch reads more experts: cost grows with the tokens."""
    return 0.002 * min(batch * (k + 1), 8) + 0.0002 * batch * (k + 1)


def test_best_draft_len_literal_cases():
    assert best_draft_len(lambda b, k: 1.0, 0.6, 8, 1) == 8  # free drafts: as long as allowed
    assert best_draft_len(lambda b, k: 1.0 + k, 0.6, 8, 1) == 0  # each draft costs a forward
    assert best_draft_len(lambda b, k: 1.0, 0.0, 8, 1) == 0  # nothing accepted: ties go short


def test_a_dense_table_drafts_most_at_the_tail():
    table = AdaptiveDraftRange.from_cost(dense, 0.63, 8, 256).by_concurrency
    assert table[0] == 8 and table[-1] < table[0]
    assert list(table) == sorted(table, reverse=True)


def test_an_moe_table_drafts_nothing_alone_but_drafts_in_a_batch():
    draft_range = AdaptiveDraftRange.from_cost(moe, 0.63, 8, 256)
    assert draft_range.draft_len(1) == 0
    assert max(draft_range.by_concurrency) > 0


def test_the_table_is_read_at_the_power_of_two_below_and_capped_by_the_batch_threshold():
    draft_range = AdaptiveDraftRange(8, 64, (1, 2, 3, 8))
    assert [draft_range.draft_len(b) for b in (1, 2, 3, 4, 7, 8, 16, 100)] == [1, 2, 2, 3, 3, 8, 4, 0]
    assert AdaptiveDraftRange(8, 128).draft_len(32) == 4  # no table: Seer's min(...) form


@pytest.mark.parametrize("name, drafts_alone", [("Moonlight", False), ("Qwen2-VL-72B", True)])
def test_the_presets_thresholds_follow_their_architecture(name, drafts_alone):
    preset = get_preset(name)
    topology = _topology(preset, SYSTEMS["seer"])
    draft_range = _seer_draft_range(preset, topology, _spec_costs(preset, topology))
    assert (draft_range.draft_len(1) > 0) == drafts_alone  # Moonlight is MoE, Qwen2-VL dense
    assert draft_range.max_draft_per_request == preset.max_draft_per_request  # Seer Table 2's 8
