"""A measured run's forwards priced under another profile (`sim.projection`), on literal forwards."""

from __future__ import annotations

import pytest

from specroll.policies.base import ForwardStats
from specroll.policies.cost_model import CostModel
from specroll.sim.prediction import scaled
from specroll.sim.projection import mean_context, project, width

PROMPTS = {0: 4, 1: 6, 2: 5}
COST = CostModel(c_base=1.0, c_tok=0.5)  # t = 1 + 0.5 * rows * width


def _forward(ids, drafted, accepted, draft_seconds=0.0, upkeep=0.0, tree=False) -> ForwardStats:
    return ForwardStats(
        len(ids), sum(drafted), sum(accepted), len(ids) + sum(accepted), 9.9, draft_seconds,
        tuple(ids), tuple(drafted), tuple(accepted), tree=tree, upkeep_seconds=upkeep,
    )  # fmt: skip


FORWARDS = [
    _forward([0, 1], [0, 0], [0, 0], draft_seconds=0.1),  # after both prefills: plain
    _forward([0, 1], [3, 1], [2, 0], draft_seconds=0.2, upkeep=0.05),  # 4 wide
    _forward([1, 2], [0, 0], [0, 0]),  # request 0 done, request 2 admitted
]


def test_each_forward_priced_at_its_shape_prefills_once_a_request_drafting_as_measured():
    projection = project(FORWARDS, PROMPTS, COST)
    # prefills: [4, 6] padded to 6 wide, 2 rows (1 + 0.5 * 12); then [5] alone (1 + 0.5 * 5)
    assert projection.prefill_seconds == pytest.approx(7.0 + 3.5)
    assert projection.forward_seconds == pytest.approx(2.0 + 5.0 + 2.0)  # widths 1, 4, 1 at 2 rows
    assert projection.draft_seconds == pytest.approx(0.1 + 0.15)  # less the drafter's catch-up
    assert projection.makespan_seconds == pytest.approx(10.5 + 9.0 + 0.25)
    assert projection.num_forwards == 3


def test_a_rows_context_is_its_prompt_and_the_tokens_it_emitted_but_the_one_it_feeds():
    assert mean_context(FORWARDS[0], PROMPTS, {0: 1, 1: 1}) == 5.0  # (4 + 6) / 2
    assert mean_context(FORWARDS[2], PROMPTS, {1: 3, 2: 1}) == (6 + 2 + 5) / 2
    assert width(FORWARDS[1]) == 4 and width(FORWARDS[0]) == 1


def test_the_context_terms_read_the_rows_grown_contexts():
    cost = CostModel(c_base=1.0, c_tok=0.0, c_row_ctx=0.01)  # t = 1 + 0.01 * rows * context
    forwards = project(FORWARDS, PROMPTS, cost).forward_seconds
    # contexts [4, 6]; then [5, 7]; then request 1 with 3 emitted (6 + 2) beside request 2's prompt (5)
    assert forwards == pytest.approx(3 + 0.01 * (10 + 12 + 13))


def test_a_profile_twice_as_slow_doubles_the_device_part_only():
    one, two = project(FORWARDS, PROMPTS, COST), project(FORWARDS, PROMPTS, scaled(COST, 2.0))
    assert two.forward_seconds == pytest.approx(2 * one.forward_seconds)
    assert two.prefill_seconds == pytest.approx(2 * one.prefill_seconds)
    assert two.draft_seconds == one.draft_seconds
