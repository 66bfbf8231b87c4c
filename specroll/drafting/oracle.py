"""The oracle drafter: replays a previous plain rollout with the same seed as drafts.

In exact mode every drafted token is accepted, so a rollout with it bounds what any drafter can
gain under a given policy. With `corrupt_every` it replaces every n-th drafted token by a wrong one,
which exercises rejection paths in tests.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from specroll.drafting.protocol import BaseDrafter, Draft, DraftQuery


class OracleDrafter(BaseDrafter):
    name = "oracle"

    def __init__(
        self, outputs: Mapping[int, Sequence[int]], corrupt_every: int = 0, vocab_size: int = 2
    ) -> None:
        self.outputs = {k: list(v) for k, v in outputs.items()}
        self.corrupt_every = corrupt_every
        self.vocab_size = vocab_size

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        return [self._propose(q) for q in queries]

    def _propose(self, query: DraftQuery) -> Draft:
        done = len(query.context) - query.num_prompt_tokens
        tokens = self.outputs.get(query.request_id, [])[done : done + query.budget]
        if self.corrupt_every:
            tokens = [
                (t + 1) % self.vocab_size if (done + i) % self.corrupt_every == self.corrupt_every - 1 else t
                for i, t in enumerate(tokens)
            ]
        return Draft(query.request_id, tokens)
