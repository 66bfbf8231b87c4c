"""ArcticInference's SuffixDecodingCache behind specroll's drafter protocol, for side-by-side figures.

Optional: ArcticInference is never a runtime dependency. Each group (problem) gets its own cache, whose
global tree holds the group's finished and live responses; in history use, responses older than
`window` training steps are evicted, as the history drafter does. Drafting settings are those of the
reference figures in the data README: max_spec_factor=4, min_token_prob=0.1, depth 64.
"""

from __future__ import annotations

from typing import Sequence

from specroll.drafting.protocol import BaseDrafter, Draft, DraftQuery, RequestInfo

try:
    from arctic_inference.suffix_decoding import SuffixDecodingCache
except ImportError:  # not installed: callers check IS_AVAILABLE
    SuffixDecodingCache = None

IS_AVAILABLE = SuffixDecodingCache is not None


class ArcticDrafter(BaseDrafter):
    name = "arctic"

    def __init__(self, window: int | None = None, tree_tokens: int = 0, max_depth: int = 64) -> None:
        self.window, self.tree_tokens, self.max_depth = window, tree_tokens, max_depth
        self._caches: dict[int, SuffixDecodingCache] = {}
        self._group_of: dict[int, int] = {}
        self._step_of: dict[int, int] = {}  # request id -> training step, for window eviction

    def begin(self, info: RequestInfo) -> None:
        cache = self._caches.get(info.group_id)
        if cache is None:
            cache = self._caches[info.group_id] = SuffixDecodingCache(self.max_depth)
        cache.start_request(info.request_id, list(info.prompt_token_ids))
        self._group_of[info.request_id] = info.group_id
        self._step_of[info.request_id] = info.step

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        self._caches[self._group_of[request_id]].add_active_response(request_id, list(token_ids))

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        return [self._propose_one(q) for q in queries]

    def _propose_one(self, query: DraftQuery) -> Draft:
        cache = self._caches[self._group_of[query.request_id]]
        context = list(query.context[-self.max_depth :])
        draft = cache.speculate(
            query.request_id,
            context,
            max_spec_tokens=query.budget if not self.tree_tokens else self.tree_tokens,
            max_spec_factor=4.0,
            min_token_prob=0.1,
            use_tree_spec=bool(self.tree_tokens),
        )
        parents = list(draft.parents) if self.tree_tokens else None
        return Draft(query.request_id, list(draft.token_ids), parents, list(draft.probs))

    def finish(self, request_id: int) -> None:
        self._caches[self._group_of[request_id]].stop_request(request_id)

    def advance_step(self, step: int) -> None:
        if self.window is None:
            return
        for request_id, request_step in list(self._step_of.items()):
            if request_step < step - self.window:
                self._caches[self._group_of[request_id]].evict_cached_response(request_id)
                del self._step_of[request_id]
