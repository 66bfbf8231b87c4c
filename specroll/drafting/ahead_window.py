"""The draft window: when a draft made ahead of verification may still be used (SpecActor §: decoupled
drafting).

A drafter that runs beside the engine, rather than inside its step, drafts from the context it last
heard of, while the engine verifies and commits further tokens. Its draft stays a fair guess as long as
the target's committed tokens followed it: a draft made at context length L with tokens d[0..w) (w,
the draft window) is usable at a later context length L' >= L only if the tokens committed since,
context[L:L'], equal d[0:L'-L]; then what is left, d[L'-L:], cut to the query's budget, is the draft.
Otherwise the target went elsewhere and the draft is stale. Exact verification keeps it lossless either
way: a usable draft is only a better guess, never a change in what the rollout produces.

Pure and torch-free: the rule is tested literally (tests/drafting/test_ahead_window.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class AheadDraft:
    """A chain drafted for one request when its context (prompt + output) was `context_length` long."""

    request_id: int
    context_length: int
    token_ids: tuple[int, ...]  # at most the draft window
    source: str = ""  # the member of a combination that drafted it ('' for a single drafter)


def usable_tokens(draft: AheadDraft, context: Sequence[int], budget: int) -> list[int]:
    """The draft's tokens that continue `context` now, at most `budget`: empty where the draft is stale
    (the committed tokens left it), too old (they used it all up) or from a longer context than this."""
    num_committed = len(context) - draft.context_length  # tokens committed since it was drafted
    if num_committed < 0 or num_committed >= len(draft.token_ids):
        return []
    if list(context[draft.context_length :]) != list(draft.token_ids[:num_committed]):
        return []
    return list(draft.token_ids[num_committed : num_committed + budget])
