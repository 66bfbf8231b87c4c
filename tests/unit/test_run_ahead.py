"""`Request.can_run_ahead`: a request in a step in flight joins the step launched ahead of its
verification only if the step in flight, one token, cannot end it by length (torch-free)."""

from __future__ import annotations

import pytest

from specroll.engine.request import Request, SamplingParams

EOS = frozenset({0})


def request(num_output_tokens: int, max_tokens: int = 5) -> Request:
    r = Request(1, 1, 0, (3, 4, 5), SamplingParams(max_tokens=max_tokens))
    r.output_token_ids = [7] * num_output_tokens
    r.output_logprobs = [0.0] * num_output_tokens
    return r


@pytest.mark.parametrize(
    "num_output_tokens, max_tokens, expected",
    [
        (0, 5, True),
        (3, 5, True),  # the step in flight emits the 4th token; the step ahead may emit the 5th
        (4, 5, False),  # the step in flight emits the 5th, the last: nothing is left for the step ahead
        (0, 1, False),  # a one-token request
        (0, 2, True),
    ],
)
def test_the_rule_literal(num_output_tokens, max_tokens, expected):
    assert request(num_output_tokens, max_tokens).can_run_ahead() is expected


@pytest.mark.parametrize("num_output_tokens", range(5))
def test_it_runs_ahead_exactly_where_committing_one_token_leaves_it_running(num_output_tokens):
    """The rule agrees with `commit`, the one place that decides how a request ends: the step in
    flight's one token (no stop token) ends the request by length exactly where it may not run ahead."""
    r = request(num_output_tokens)
    may_run_ahead = r.can_run_ahead()
    r.commit([7], [0.0], EOS)
    assert may_run_ahead is (r.finish_reason is None)
