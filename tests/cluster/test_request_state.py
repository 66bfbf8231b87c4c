"""The coordinator's record of a request and the messages that fill it (torch-free): each side
writes only its own, and the caller's `Request` is never written."""

from __future__ import annotations

import pytest

from specroll.cluster.coordinator import RequestState
from specroll.cluster.work import Update, WorkItem
from specroll.engine.request import Request, RequestOutput, SamplingParams


def request() -> Request:
    return Request(7, 2, 1, (5, 6, 7), SamplingParams(max_tokens=4))


def test_the_record_fills_from_updates_and_hands_out_a_copy():
    given = request()
    state = RequestState(WorkItem.first(given))
    assert state.work_item().output_token_ids == ()
    assert state.apply(Update(7, 0, (11, 12), (-0.5, -0.25), num_drafted=3, num_accepted=1))
    assert state.apply(Update(7, 1, (12, 13), (-0.25, -1.0), True, "stop"))  # overlaps the token held
    state.finish("stop", None, 1.5)
    output = state.output()
    assert output == RequestOutput(7, 2, 1, [11, 12, 13], [-0.5, -0.25, -1.0], "stop")
    assert (state.num_drafted, state.num_accepted, state.finish_seconds) == (0, 0, 1.5)  # as last reported
    assert state.work_item().output_token_ids == (11, 12, 13) and state.num_tokens == 6
    output.token_ids.append(99)
    assert state.token_ids == [11, 12, 13]  # a copy
    assert given == request()  # the caller's request: untouched


def test_an_update_that_disagrees_with_the_tokens_held_is_not_applied():
    state = RequestState(WorkItem.first(request()))
    state.apply(Update(7, 0, (11, 12), (-0.5, -0.25)))
    assert not state.apply(Update(7, 1, (40,), (-0.1,)))
    assert state.token_ids == [11, 12]
    with pytest.raises(ValueError, match="skips tokens"):
        state.apply(Update(7, 3, (13,), (-0.1,)))


@pytest.mark.parametrize(
    "ended, reason, error",
    [
        (True, None, None),  # ended without a reason
        (False, "stop", None),  # a reason without an end
        (True, "error", None),  # an error without its message
        (True, "stop", "refused"),  # a message on a request that did not fail
    ],
)
def test_an_update_carries_the_finish_its_request_decided(ended, reason, error):
    with pytest.raises(ValueError, match="an update that ends carries its finish reason"):
        Update(7, 0, (), (), ended, reason, error)


def test_a_resumed_request_keeps_its_noise_key_on_any_worker():
    """The key its tokens are drawn with (a served choice's seed and index) survives every dispatch."""
    keyed = Request(7, 2, 1, (5, 6, 7), SamplingParams(max_tokens=4), noise_key=123456789)
    state = RequestState(WorkItem.first(keyed))
    assert state.apply(Update(7, 0, (11,), (-0.5,)))
    assert state.work_item().to_request().noise_key == 123456789
    assert WorkItem.first(request()).to_request().noise_key == 7  # unkeyed: its request id
