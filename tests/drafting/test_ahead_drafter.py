"""The ahead drafter: drafts made in another process, used as far as the committed tokens follow them,
never waited for, and a failing or dying drafting process costs drafts only. Every wait is bounded."""

from __future__ import annotations

import gc
import os
import time
import warnings

import pytest

from specroll.drafting.ahead import AheadDrafter
from specroll.drafting.protocol import BaseDrafter, Draft, DraftQuery, RequestInfo

TIMEOUT = 20.0  # seconds any wait for the drafting process may take before the test fails
PROMPT = (1, 2, 3)


# ---- inner drafters, built in the drafting process (module-level factories: they pickle) -----------


class OnceDrafter(BaseDrafter):
    """Drafts the prompt's count onwards (4, 5, ...) at the prompt only, naming its process's id."""

    def propose(self, queries):
        return [self._once(q) for q in queries]

    def _once(self, q):
        if len(q.context) != q.num_prompt_tokens:
            return Draft(q.request_id)
        tokens = list(range(q.context[-1] + 1, q.context[-1] + 1 + q.budget))
        return Draft(q.request_id, tokens, source=f"pid:{os.getpid()}")


class SleepyDrafter(BaseDrafter):
    def propose(self, queries):
        time.sleep(30)
        return super().propose(queries)


class RaisingDrafter(BaseDrafter):
    def observe(self, request_id, token_ids):
        raise ValueError("the inner drafter broke")


class DyingDrafter(BaseDrafter):
    def observe(self, request_id, token_ids):
        os._exit(3)


def once_drafter():
    return OnceDrafter()


def sleepy_drafter():
    return SleepyDrafter()


def raising_drafter():
    return RaisingDrafter()


def dying_drafter():
    return DyingDrafter()


# ---- helpers ----------------------------------------------------------------------------------------


@pytest.fixture
def ahead(request):
    """An ahead drafter over the factory the test names, closed after the test whatever happens."""
    drafter = AheadDrafter(request.param)
    yield drafter
    drafter.close()


def query(context, budget=3):
    return DraftQuery(0, 0, list(context), len(PROMPT), budget)


def tokens_once_drafted(drafter, context, budget=3):
    """Propose until a draft arrives (at most TIMEOUT seconds)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        draft = drafter.propose([query(context, budget)])[0]
        if draft.token_ids:
            return draft
        time.sleep(0.01)
    pytest.fail("no draft arrived from the drafting process")


def is_running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---- tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ahead", [once_drafter], indirect=True)
def test_drafts_come_from_another_process_and_follow_the_committed_tokens(ahead):
    ahead.begin(RequestInfo(0, 0, PROMPT))
    first = tokens_once_drafted(ahead, PROMPT)
    assert first.token_ids == [4, 5, 6]
    assert first.source.startswith("pid:") and first.source != f"pid:{os.getpid()}"
    ahead.observe(0, [4, 5])  # the target followed the draft: what is left of it is used
    assert ahead.propose([query([*PROMPT, 4, 5])])[0].token_ids == [6, 7, 8]
    ahead.observe(0, [99])  # and then left it: stale
    assert ahead.propose([query([*PROMPT, 4, 5, 99])])[0].token_ids == []
    assert ahead.draft_cost() == (0.0, 0.0)  # the policy prices none of it on the engine's thread


@pytest.mark.parametrize("ahead", [sleepy_drafter], indirect=True)
def test_propose_never_waits_for_the_drafting_process(ahead):
    ahead.begin(RequestInfo(0, 0, PROMPT))
    assert ahead.wait_until_ready(TIMEOUT)
    for token in range(4, 9):  # the process sleeps 30 s on its first batch
        started = time.perf_counter()
        draft = ahead.propose([query(range(1, token))])[0]
        assert time.perf_counter() - started < 0.5
        assert draft.token_ids == []
        ahead.observe(0, [token])


@pytest.mark.parametrize(
    "ahead, cause",
    [(raising_drafter, "the inner drafter broke"), (dying_drafter, "exit code 3")],
    indirect=["ahead"],
)
def test_a_failing_drafting_process_costs_drafts_only_and_warns_once(ahead, cause):
    ahead.begin(RequestInfo(0, 0, PROMPT))
    ahead.observe(0, [4])
    deadline = time.monotonic() + TIMEOUT
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while ahead.failure is None and time.monotonic() < deadline:
            assert ahead.propose([query([*PROMPT, 4])])[0].token_ids == []
            time.sleep(0.01)
        for _ in range(3):  # it goes on answering, with nothing
            ahead.observe(0, [5])
            assert ahead.propose([query([*PROMPT, 4, 5])])[0].token_ids == []
    warned = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(warned) == 1 and cause in str(warned[0].message), [str(w.message) for w in caught]


def test_close_and_dropping_the_drafter_end_the_process():
    closed, dropped = AheadDrafter(once_drafter), AheadDrafter(once_drafter)
    pids = [closed.pid, dropped.pid]
    assert all(d.wait_until_ready(TIMEOUT) for d in (closed, dropped))
    assert all(is_running(pid) for pid in pids)
    closed.close()
    del dropped
    gc.collect()
    assert not any(is_running(pid) for pid in pids)
    assert closed.propose([query(PROMPT)])[0].token_ids == []  # closed: drafts nothing, raises nothing
