import math

import pytest

from specroll.policies.acceptance_estimates import AcceptanceTracker
from specroll.policies.base import BatchView, RequestView
from specroll.policies.cost_model import CostModel
from specroll.policies.das import DasPolicy, DasRequest, DasSolution, budget, cost, per_forward_drafts, solve
from specroll.policies.lengths import LengthPredictor

REQUESTS = [
    DasRequest(400, 0.7, 1.0),
    DasRequest(150, 0.5, 1.2),
    DasRequest(60, 0.8, 0.9),
    DasRequest(20, 0.6),
]
C_BASE, C_TOK = 2e-3, 1e-4


def forwards_needed(request, p):
    """Eq. 4's term: l (1 - k + k exp(-alpha p / l))."""
    return request.length * (
        1 - request.capacity + request.capacity * math.exp(-request.efficiency * p / request.length)
    )


def test_budget_makes_the_constraint_tight():
    for r in REQUESTS[:2]:
        assert forwards_needed(r, budget(r, 120.0)) == pytest.approx(120.0)
    assert budget(REQUESTS[3], 120.0) == 0.0  # short: l <= N


def test_closed_form_matches_a_numeric_optimiser():
    import numpy as np
    from scipy import optimize  # in the test extra: this check never skips

    n = len(REQUESTS)
    constraints = [
        {"type": "ineq", "fun": lambda x, r=r, i=i: x[n] - forwards_needed(r, x[i])}
        for i, r in enumerate(REQUESTS)
    ]
    result = optimize.minimize(
        lambda x: C_BASE * x[n] + C_TOK * sum(x[:n]),
        x0=np.r_[np.full(n, 10.0), 400.0],
        constraints=constraints,
        bounds=[(0, None)] * (n + 1),
        method="SLSQP",
        options={"maxiter": 500, "ftol": 1e-12},
    )
    solution = solve(REQUESTS, C_BASE, C_TOK)
    assert cost(REQUESTS, solution.num_forwards, C_BASE, C_TOK) == pytest.approx(result.fun, rel=1e-6)
    assert solution.num_forwards == pytest.approx(result.x[n], rel=1e-4)
    assert solution.budgets[0] == pytest.approx(result.x[0], rel=1e-4)
    assert solution.budgets[2:] == [0.0, 0.0]  # the short requests skip speculation


def test_solution_is_the_minimum_over_a_grid():
    solution = solve(REQUESTS, C_BASE, C_TOK)
    best = cost(REQUESTS, solution.num_forwards, C_BASE, C_TOK)
    grid = [100.5 + i for i in range(300)]  # feasible N > max l (1 - k) = 120 is inside
    assert all(best <= cost(REQUESTS, n, C_BASE, C_TOK) + 1e-12 for n in grid if n > 120)


def test_longer_requests_get_larger_budgets():
    same = [DasRequest(l, 0.6) for l in (50, 200, 800)]
    budgets = solve(same, C_BASE, C_TOK).budgets
    assert budgets[0] <= budgets[1] <= budgets[2] and budgets[2] > 0


def test_per_forward_drafts_literal():
    assert per_forward_drafts(DasSolution(100.0, [0.0, 240.0, 2000.0, math.inf]), max_draft=8) == [0, 2, 8, 8]


def test_length_predictor_classes():
    predictor = LengthPredictor(min_history=3)
    history = [10, 20, 30, 100, 110, 120]
    assert predictor.predict(history[:2], 5, 500).length_class == "unknown"
    # terciles 30 / 110: short {10, 20}, medium {30, 100}, long {110, 120}
    long = predictor.predict(history, 50, 500)  # past 50: one medium, two long
    assert long.length_class == "long" and long.num_remaining == pytest.approx(65.0)  # mean(60, 70)
    tied = predictor.predict(history, 5, 500)  # two of each: ties go to the longer class
    assert tied.length_class == "long" and tied.num_remaining == pytest.approx(110.0)  # mean(105, 115)
    assert predictor.predict(history, 50, 10).num_remaining == 10  # capped by max_tokens


def test_policy_speculates_at_small_batches_only():
    policy = DasPolicy(CostModel(c_base=2e-3, c_tok=1e-4))
    small = BatchView([RequestView(0, 0, 10, 500, 0, 0, 0)], max_draft=8)
    assert policy.decide(small).draft_lengths[0] > 0
    large = BatchView([RequestView(i, 0, 10, 3, 0, 0, 0) for i in range(64)], max_draft=8)
    assert DasPolicy(CostModel(c_base=2e-3, c_tok=1e-4)).decide(large).draft_lengths == (0,) * 64


def test_long_requests_draft_when_tokens_are_cheap():
    """With a near-free token cost N* sits at the longest request's floor l (1 - k), where its budget
    is unbounded: it drafts the maximum, a shorter one a little, the shortest nothing."""
    requests = [DasRequest(l, 0.6) for l in (500.0, 6000.0, 10000.0)]
    solution = solve(requests, c_base=6e-3, c_tok=1e-7)
    assert solution.num_forwards == pytest.approx(10000.0 * 0.4, rel=1e-3)
    assert per_forward_drafts(solution, max_draft=8) == [0, 1, 8]


def test_a_request_is_predicted_by_its_own_prompts_lengths_before_the_pool():
    """Every finished request ran to 1,000 tokens, but request 0's prompt's requests stopped at 60:
    50 tokens in, it has about 10 to go, far below N*, and gets no budget; request 1, with no history
    of its own, is predicted by the pool, and so is request 2, whose prompt's requests all stopped
    before 50 tokens."""
    policy = DasPolicy(
        CostModel(c_base=6e-3, c_tok=1e-7), tracker=AcceptanceTracker(finished_lengths=[1000] * 100)
    )
    views = [
        RequestView(0, 0, 50, 2000, 0, 0, 0, prompt_lengths=(60,) * 8),
        RequestView(1, 1, 50, 2000, 0, 0, 0),
        RequestView(2, 2, 50, 2000, 0, 0, 0, prompt_lengths=(40,) * 8),
    ]
    drafts = policy.decide(BatchView(views, max_draft=8)).draft_lengths
    assert drafts[0] == 0 and drafts[1] == drafts[2] > 0
    predicted = [policy._predicted(v) for v in views]
    assert [p.num_remaining for p in predicted] == [10.0, 950.0, 950.0]
