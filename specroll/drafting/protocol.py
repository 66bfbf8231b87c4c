"""The contract between the engine and every drafter.

A drafter proposes tokens that the target model then verifies; it can change how fast a rollout runs,
never what it produces. The engine drives each drafter through one lifecycle:

    begin(info)            a request enters the rollout (its prompt, its group, the training step)
    propose(queries)       before every verification forward, for the requests the policy gives a budget > 0
    observe(id, tokens)    tokens committed to a request's output (accepted drafts + the bonus token)
    finish(id)             the request has finished; its output is final
    advance_step(step)     the RL trainer moved to the next training step (history drafters)

A drafter that conditions on the target's hidden states (a draft head) sets `needs_features`; after
every forward, before `observe`, it is given the hidden states of the positions the forward committed
(`observe_features(TargetFeatures)`), which the forward computed anyway.

A drafter that holds a draft head trainable online says so with `trainable_head()` (a `TrainableHead`;
None for the others, and a combination answers with its member's), whatever else it combines: that is
all online head training (`specroll.train.online_head`) reads of a drafter.

Vocabulary: a *request* is one sampled response; a *group* is the n requests of one prompt; a *step*
is one RL training step. This module imports no torch: only `Draft.probs` may hold a tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from specroll.drafting.draft_tree import accepted_path


@dataclass(frozen=True)
class RequestInfo:
    """What a drafter learns about a request when it enters the rollout."""

    request_id: int
    group_id: int  # the prompt's id: requests sharing it are siblings
    prompt_token_ids: tuple[int, ...]
    step: int = 0  # RL training step this rollout belongs to


@dataclass(frozen=True)
class DraftQuery:
    """One request's drafting question for one verification forward."""

    request_id: int
    group_id: int
    context: Sequence[int]  # prompt + output so far; the draft continues it
    num_prompt_tokens: int
    budget: int  # draft tokens the policy allows this request in this forward (>= 1; 0 is never asked)
    temperature: float = 1.0  # the request's sampling settings (sampling drafters match them)
    top_k: int = 0
    top_p: float = 1.0
    noise_key: int | None = None  # the request's noise key (`Request.noise_key`); None: request_id
    tree: bool = False  # the policy asks for a tree of up to `budget` nodes (`drafts_trees`), not a chain

    @property
    def noise_id(self) -> int:
        """The key of the target's noise for this request: a coupled draw reads the same uniforms."""
        return self.request_id if self.noise_key is None else self.noise_key


@dataclass
class Draft:
    """A proposal for one request.

    token_ids: the drafted tokens, at most the query's budget.
    parents:   None for a linear draft; for a tree, parents[i] is the index of token i's parent in
               token_ids, or -1 when its parent is the context's last token. Parents come before
               children.
    scores:    per-token confidence in [0, 1] (a frequency estimate for model-free drafters), or None.
    probs:     draft distribution q for each drafted token, shape (len(token_ids), vocab), for
               rejection-mode verification; None means a deterministic draft (q is one-hot).
    source:    which drafter proposed it, where a combination chose among several ('' otherwise).
    """

    request_id: int
    token_ids: list[int] = field(default_factory=list)
    parents: list[int] | None = None
    scores: list[float] | None = None
    probs: Any = None  # (k, V) tensor, or None
    source: str = ""

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def is_tree(self) -> bool:
        return self.parents is not None and any(p != i - 1 for i, p in enumerate(self.parents))

    @property
    def main_chain_length(self) -> int:
        """Its leading tokens that form a chain: all of a linear draft's, a tree's nodes each the child
        of the one before it (its first branch, where a tree cannot be verified)."""
        if self.parents is None:
            return self.num_tokens
        return next((i for i, p in enumerate(self.parents) if p != i - 1), len(self.parents))

    def kept_in_exact_mode(self, following: Sequence[int]) -> int:
        """How many of its tokens exact verification keeps where the target's own tokens after the
        context are `following` (a recorded response, replayed): the depth of the deepest drafted path
        spelling its start (`draft_tree.accepted_path`); a chain keeps its matching prefix."""
        parents = range(-1, self.num_tokens - 1) if self.parents is None else self.parents
        return len(accepted_path(self.token_ids, parents, lambda _, depth: _at(following, depth)))


def _at(tokens: Sequence[int], index: int) -> int | None:
    return tokens[index] if index < len(tokens) else None


@dataclass(frozen=True)
class TargetFeatures:
    """The target's features at the positions one forward committed, per request: its final hidden
    states (the first H columns), then the outputs of the drafter's `feature_layers`, if any.

    hidden row i of a request is the state at context position context_length - 1 - num_kept + i,
    so its last row is the state whose logits drew the request's newest token (the context's last).
    """

    request_ids: tuple[int, ...]
    hidden: Any  # (sum of num_kept, F) tensor on the model's device, the requests' rows in order
    num_kept: tuple[int, ...]  # rows per request (>= 1)
    context_lengths: tuple[int, ...]  # each request's prompt + output length once the tokens are committed
    token_ids: tuple[tuple[int, ...], ...]  # each request's tokens at those positions + its newest token

    def last_rows(self) -> list[int]:
        """Index into `hidden` of each request's last row."""
        ends, total = [], 0
        for n in self.num_kept:
            total += n
            ends.append(total - 1)
        return ends


@runtime_checkable
class TrainableHead(Protocol):
    """A draft head held by a drafter, as an online trainer sees it: the trainer listens to the target
    features the drafter is given, trains a copy of the head on them, and offers the copy's weights
    back, which the drafter swaps in between two forwards."""

    embedding: Any  # (V, H) the target's input embeddings the head reads, the live tensor
    num_swaps: int  # offered weights taken in so far

    @property
    def train_depth(self) -> int:
        """Draft steps a training window unrolls (as deep as the head's warm start did)."""
        ...

    def add_listener(self, listener: Callable[[TargetFeatures], None]) -> None:
        """Call `listener` with every `TargetFeatures` the drafter is given, after the drafter's own use."""
        ...

    def trainable_copy(self) -> Any:
        """A float32 copy of the head (a `DraftHead` module) for a trainer to update."""
        ...

    def hold_drafts(self) -> None:
        """Draft nothing until weights are offered (a head not yet trained)."""
        ...

    def offer_weights(self, weights: Mapping[str, Any]) -> None:
        """New head weights (the copy's `state_dict()`), from any thread, taken in at the next proposal."""
        ...


@runtime_checkable
class Drafter(Protocol):
    """Strategy object proposing draft tokens; see the module docstring for the lifecycle. This is
    everything the engine, its factory and online head training use of a drafter; `BaseDrafter`
    gives each a default."""

    name: str
    needs_features: bool  # True: the engine calls observe_features after every forward
    feature_layers: tuple[int, ...]  # the target's decoder layers the features must also carry
    member_names: frozenset[str]  # a set of drafters' members by name (empty for a single drafter)
    drafts_trees: bool  # True: answers a query asking for a tree (`DraftQuery.tree`) with one

    def begin(self, info: RequestInfo) -> None: ...

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]: ...

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None: ...

    def observe_features(self, features: TargetFeatures) -> None: ...

    def finish(self, request_id: int) -> None: ...

    def advance_step(self, step: int) -> None: ...

    def member(self, name: str | None) -> "Drafter":
        """The drafter that proposes for a decision naming `name` (`member_names`): itself for one."""
        ...

    def draft_cost(self) -> tuple[float, float] | None:
        """(intercept, slope) of seconds per draft token against batch size, measured on this machine
        now, for the policy's cost model; None where the drafter does not measure its own."""
        ...

    def upkeep_seconds(self) -> float:
        """Seconds of the last `propose` spent catching up context the drafter skipped while nothing
        was drafted (a draft model's cache), not drafting: paid once, not per drafting forward."""
        ...

    def trainable_head(self) -> TrainableHead | None:
        """The draft head this drafter holds, for online training; None where it holds none."""
        ...


class BaseDrafter:
    """The contract's defaults: no features, one drafter, no measured cost, no-op lifecycle; a drafter
    overrides only what it uses."""

    name = "base"
    needs_features = False
    feature_layers: tuple[int, ...] = ()
    member_names: frozenset[str] = frozenset()
    drafts_trees = False

    def observe_features(self, features: TargetFeatures) -> None:
        pass

    def begin(self, info: RequestInfo) -> None:
        pass

    def propose(self, queries: Sequence[DraftQuery]) -> list[Draft]:
        return [Draft(q.request_id) for q in queries]

    def observe(self, request_id: int, token_ids: Sequence[int]) -> None:
        pass

    def finish(self, request_id: int) -> None:
        pass

    def advance_step(self, step: int) -> None:
        pass

    def member(self, name: str | None) -> "Drafter":
        return self

    def draft_cost(self) -> tuple[float, float] | None:
        return None

    def upkeep_seconds(self) -> float:
        return 0.0

    def trainable_head(self) -> TrainableHead | None:
        return None
