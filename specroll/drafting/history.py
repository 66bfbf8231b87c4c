"""History drafting (DAS §4.1): per-problem suffix indexes over a sliding window of training steps.

A problem's responses at the last `window` training steps predict its responses now, because the policy
moves little from one step to the next. Each problem (the request's `group_id`) has one index holding
those responses; a response of step s weighs decay^(t - s) at step t, so older steps count less (the
weights are stored as decay^-s, which keeps every ratio right without reweighting as steps advance).

A finished response joins its problem's history at the next `advance_step`, never during its own step,
so the history stays the previous steps'; responses leave once they are `window` steps old.

Observing only records tokens: a request's match point is brought up to date when it proposes, so a
request the policy never drafts for costs nothing but its token list (and its problem's index, itself
deferred, is built only when one of its requests proposes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from specroll.drafting.protocol import Draft, DraftQuery, RequestInfo
from specroll.drafting.suffix_draft import RESPONSE_START, DraftShape, SuffixDrafter, draft_from_match
from specroll.drafting.suffix_index import DEFAULT_MAX_DEPTH, Node, SuffixIndex

_MAX_WEIGHT_EXPONENT = 400  # rebuild before decay^-s could overflow a float
DEFAULT_WINDOW = 3  # training steps of responses a problem's history holds


@dataclass
class _ProblemHistory:
    index: SuffixIndex
    base_step: int  # weights are decay^-(step - base_step)
    responses: dict[int, tuple[int, list[int]]] = field(default_factory=dict)  # seq id -> (step, tokens)


@dataclass
class _LiveRequest:
    group_id: int
    step: int
    token_ids: list[int]
    match: Node | None  # longest suffix of [RESPONSE_START] + token_ids[:num_matched] in the problem's index
    num_matched: int = -1  # -1: `match` must be found afresh (the index changed since)


class HistoryDrafter(SuffixDrafter):
    """Drafts each request from its problem's responses at the previous `window` training steps."""

    name = "history"

    def __init__(
        self,
        window: int = DEFAULT_WINDOW,
        decay: float = 0.5,
        shape: DraftShape = DraftShape(),
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must lie in (0, 1], got {decay}")
        super().__init__(shape, max_depth)
        self.window, self.decay = window, decay
        self.step = 0
        self._problems: dict[int, _ProblemHistory] = {}
        self._live: dict[int, _LiveRequest] = {}
        self._staged: list[tuple[int, int, list[int]]] = []  # (group id, step, tokens) of finished requests
        self._next_seq_id = 0

    # ---- request lifecycle ----------------------------------------------------------------------

    def begin(self, info: RequestInfo) -> None:
        self._live[info.request_id] = _LiveRequest(info.group_id, info.step, [], None)

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self._live[request_id].token_ids.extend(token_ids)

    def _propose_one(self, query: DraftQuery) -> Draft:
        request = self._live[query.request_id]
        problem = self._problems.get(request.group_id)
        if problem is None:
            return Draft(query.request_id, scores=[])
        self._catch_up(request, problem.index)
        return draft_from_match(problem.index, request.match, query, self.shape)

    def finish(self, request_id: int) -> None:
        request = self._live.pop(request_id)
        self._staged.append((request.group_id, request.step, request.token_ids))

    # ---- training steps -------------------------------------------------------------------------

    def advance_step(self, step: int) -> None:
        """Enter training step `step`: commit finished responses, drop those older than the window."""
        self.step = step
        for group_id, response_step, token_ids in self._staged:
            self._add_response(group_id, response_step, token_ids)
        self._staged.clear()
        for group_id in list(self._problems):
            self._evict_older(group_id, step - self.window)
        for request in self._live.values():
            request.num_matched = -1

    def evict(self, group_id: int) -> None:
        """Forget a problem's history."""
        self._problems.pop(group_id, None)
        for request in self._live.values():
            if request.group_id == group_id:
                request.num_matched = -1

    @property
    def num_problems(self) -> int:
        return len(self._problems)

    def num_responses(self, group_id: int) -> int:
        problem = self._problems.get(group_id)
        return len(problem.responses) if problem else 0

    # ---- internals ------------------------------------------------------------------------------

    def _add_response(self, group_id: int, step: int, token_ids: list[int]) -> None:
        problem = self._problems.get(group_id)
        if problem is None:
            problem = self._problems[group_id] = _ProblemHistory(SuffixIndex(self.max_depth), step)
        if step - problem.base_step > _MAX_WEIGHT_EXPONENT:
            problem = self._rebuild(group_id)
        seq_id = self._next_seq_id
        self._next_seq_id += 1
        problem.responses[seq_id] = (step, token_ids)
        problem.index.add(seq_id, [RESPONSE_START, *token_ids], self._weight(problem, step))

    def _weight(self, problem: _ProblemHistory, step: int) -> float:
        return self.decay ** -(step - problem.base_step)

    def _evict_older(self, group_id: int, oldest_step: int) -> None:
        problem = self._problems[group_id]
        for seq_id in [s for s, (step, _) in problem.responses.items() if step < oldest_step]:
            problem.index.remove(seq_id)
            del problem.responses[seq_id]
        if not problem.responses:
            del self._problems[group_id]

    def _rebuild(self, group_id: int) -> _ProblemHistory:
        old = self._problems[group_id]
        base = min(step for step, _ in old.responses.values())
        problem = self._problems[group_id] = _ProblemHistory(SuffixIndex(self.max_depth), base)
        for seq_id, (step, token_ids) in old.responses.items():
            problem.responses[seq_id] = (step, token_ids)
            problem.index.add(seq_id, [RESPONSE_START, *token_ids], self._weight(problem, step))
        return problem

    def _catch_up(self, request: _LiveRequest, index: SuffixIndex) -> None:
        """Bring the request's match point up to its output so far."""
        if request.num_matched < 0:
            request.match = index.match([RESPONSE_START, *request.token_ids[-self.max_depth :]])
        else:
            request.match = index.walk(request.match, request.token_ids[request.num_matched :])
        request.num_matched = len(request.token_ids)
