"""The contract between the engine and a speculation policy. Imports no torch.

Before every verification forward the policy sees the running batch and returns one
`DraftDecision`: per request, how many draft tokens to propose and verify (0 = plain decoding), and,
for a policy that chooses among drafters, which drafter proposes them. After the forward it is told
what happened (`ForwardStats`), so adaptive policies can learn from acceptance and measured time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class RequestView:
    request_id: int
    group_id: int
    num_output_tokens: int
    num_remaining: int  # tokens it may still emit before max_tokens
    num_drafted: int  # over its lifetime so far
    num_accepted: int
    num_forwards: int  # verification forwards it took part in
    num_context_tokens: int = 0  # positions cached before this forward (prompt + output); 0 = not reported
    # output lengths its prompt's requests finished with recently (its group's earlier in this step, and
    # earlier steps'), sorted: `prompt_lengths.PromptLengths`, one tuple shared by the prompt's requests
    prompt_lengths: tuple[int, ...] = ()


@dataclass(frozen=True)
class BatchView:
    requests: Sequence[RequestView]
    max_draft: int  # the engine's cap on any request's draft (tokens of a chain, nodes of a tree)
    trees: bool = False  # whether a decision may ask for trees (the drafter drafts them, exact mode)
    num_waiting: int | None = None  # requests queued for a slot of this engine; None: not reported
    finished_lengths: Sequence[int] = ()  # output lengths of requests this engine finished recently, sorted

    @property
    def batch_size(self) -> int:
        return len(self.requests)

    @property
    def drains(self) -> bool:
        """Nothing waits for a slot: a slot freed stays empty, so the batch is done when its last
        request is (the rollout's tail)."""
        return self.num_waiting == 0

    def draft_limits(self) -> list[int]:
        """Each request's longest useful draft: the engine's cap, and one short of its remaining
        tokens (a request that may emit only one more token gains nothing from drafting)."""
        return [max(0, min(self.max_draft, v.num_remaining - 1)) for v in self.requests]

    def clip(self, draft_lengths: Sequence[int]) -> list[int]:
        """Draft lengths as the engine runs them: within `draft_limits`, never negative."""
        return [max(0, min(k, limit)) for k, limit in zip(draft_lengths, self.draft_limits())]


@dataclass(frozen=True)
class DraftDecision:
    """A policy's answer for one forward."""

    draft_lengths: tuple[int, ...]  # per request, in batch order; 0 = plain decoding
    drafter: str | None = None  # the member of a drafter set that proposes; None = the engine's drafter
    tree: bool = False  # drafts are trees of up to draft_lengths[i] nodes, not chains (`BatchView.trees`)

    @classmethod
    def uniform(cls, k: int, batch_size: int, drafter: str | None = None) -> "DraftDecision":
        return cls((k,) * batch_size, drafter)

    @property
    def shape(self) -> str:
        """What the forward verifies, as telemetry names it: `none`, `chain-K` or `tree-N` (K, N the
        widest request's)."""
        return draft_shape(max(self.draft_lengths, default=0), self.tree)


def draft_shape(width: int, tree: bool) -> str:
    """`none`, `chain-K` or `tree-N`: a forward's drafts, by its widest request's draft."""
    return "none" if width == 0 else f"{'tree' if tree else 'chain'}-{width}"


@dataclass(frozen=True)
class ForwardStats:
    """What one verification forward did."""

    batch_size: int
    num_drafted: int  # draft tokens verified, over the batch
    num_accepted: int  # of those, accepted
    num_emitted: int  # tokens the requests kept (accepted + one per request, none past a stop)
    forward_seconds: float
    draft_seconds: float  # drafting, upkeep included
    request_ids: tuple[int, ...] = ()  # the batch, in order
    drafted: tuple[int, ...] = ()  # draft tokens verified, per request
    accepted: tuple[int, ...] = ()  # of those, accepted, per request
    sources: tuple[str, ...] = ()  # which drafter proposed each request's draft ('' if not named)
    drafter: str | None = None  # the drafter the decision named
    tree: bool = False  # the decision asked for trees, or the drafter drafted some
    upkeep_seconds: float = 0.0  # of draft_seconds, the drafter catching up context it skipped

    @property
    def steady_seconds(self) -> float:
        """What the forward costs as every forward of its shape would: its forward and drafting, less
        the drafter's one-time catch-up (`upkeep_seconds`), which prices no shape."""
        return self.forward_seconds + self.draft_seconds - self.upkeep_seconds

    @property
    def shape(self) -> str:
        """`none`, `chain-K` or `tree-N` (`draft_shape`), by the widest draft verified."""
        return draft_shape(max(self.drafted, default=0), self.tree)


@runtime_checkable
class SpeculationPolicy(Protocol):
    name: str

    def decide(self, batch: BatchView) -> DraftDecision: ...

    def observe(self, stats: ForwardStats) -> None: ...

    def new_target(self) -> None:
        """The target's weights changed (an RL step, and with them an online drafter's): estimates
        of acceptance made against the old ones no longer hold."""
        ...
