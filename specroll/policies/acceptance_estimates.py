"""Live per-request estimates of the acceptance rate alpha (the chance a draft token is accepted).
Imports no torch.

A forward that verifies a draft of d tokens and accepts a of them observed a + [a < d] Bernoulli
trials of "the next draft token is accepted" with a successes (the first rejection ends the run).
So alpha's maximum-likelihood estimate is successes / trials, not accepted / drafted, which is
biased low because a draft's tail is never tried once a token is rejected.

The tracker sees each request's lifetime counters every forward and takes differences, so it needs
no engine support. A request whose earlier forwards it did not see (admitted before the policy, or
back from preemption) starts from accepted / drafted, the conservative reading.

The estimate shrinks toward a prior: the pooled alpha of every request seen so far (or `prior_alpha`
before there is any), weighted as `prior_strength` pseudo-trials, i.e. a Beta prior whose mean is
the batch's alpha.

A new target (an RL step's weights) does not start from `prior_alpha` again: one step moves the
policy a little, so the pooled alpha measured against the old weights is a far better guess than a
constant, and a 0.6 prior on a drafter accepting 0.2 (suffix drafts of SmolLM2 at T = 1) sends every
step's first forwards to drafts that lose. The old pooled alpha is carried into the new target's as
at most `carried_trials` trials' worth of evidence, which the new measurements outweigh within a few
forwards; the per-request counts are dropped (the step's requests are new).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from specroll.policies.base import BatchView, RequestView
from specroll.policies.remaining_lengths import WINDOW as FINISHED_WINDOW


@dataclass
class _Counts:
    num_drafted: int  # the lifetime counters as last seen
    num_accepted: int
    successes: float
    trials: float


@dataclass
class AcceptanceTracker:
    prior_alpha: float = 0.6
    prior_strength: float = 4.0
    carried_trials: float = 32.0  # the old target's pooled trials a new target starts from, at most
    _requests: dict[int, _Counts] = field(default_factory=dict)
    _pooled_successes: float = 0.0
    _pooled_trials: float = 0.0
    finished_lengths: list[int] = field(default_factory=list)  # the last FINISHED_WINDOW requests' to leave
    _last_lengths: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.prior_alpha <= 1.0:
            raise ValueError(f"prior_alpha must be in [0, 1], got {self.prior_alpha}")
        if self.prior_strength < 0 or self.carried_trials < 0:
            raise ValueError(
                f"prior_strength and carried_trials must be >= 0, got {self.prior_strength}, "
                f"{self.carried_trials}"
            )

    def update(self, batch: BatchView, fold: bool = True) -> None:
        """Fold in what happened since the last call (`fold`; else only note the counters: the last
        forward's drafts were not chains); requests no longer running are finished."""
        for view in batch.requests:
            self._update_one(view, fold)
        running = {v.request_id for v in batch.requests}
        for request_id in [r for r in self._requests if r not in running]:
            del self._requests[request_id]
            self.finished_lengths.append(self._last_lengths.pop(request_id))
        del self.finished_lengths[:-FINISHED_WINDOW]  # `das` scans them for every request a forward
        self._last_lengths.update({v.request_id: v.num_output_tokens for v in batch.requests})

    def new_target(self) -> None:
        """The target or drafter changed: forget each request's counts, and carry the pooled alpha on
        as at most `carried_trials` trials (module docstring); the output lengths of finished requests
        still say how long responses run."""
        carried = min(self._pooled_trials, self.carried_trials)
        alpha = self.pooled_alpha
        self._requests, self._last_lengths = {}, {}
        self._pooled_successes, self._pooled_trials = alpha * carried, carried

    def _update_one(self, view: RequestView, fold: bool = True) -> None:
        counts = self._requests.get(view.request_id)
        if counts is None:
            counts = _Counts(view.num_drafted, view.num_accepted, view.num_accepted, view.num_drafted)
            self._add_pooled(counts.successes, counts.trials)
            self._requests[view.request_id] = counts
            return
        drafted = view.num_drafted - counts.num_drafted
        accepted = view.num_accepted - counts.num_accepted
        if drafted > 0 and fold:
            trials = num_trials(drafted, accepted)
            counts.successes += accepted
            counts.trials += trials
            self._add_pooled(accepted, trials)
        counts.num_drafted, counts.num_accepted = view.num_drafted, view.num_accepted

    def _add_pooled(self, successes: float, trials: float) -> None:
        self._pooled_successes += successes
        self._pooled_trials += trials

    @property
    def pooled_trials(self) -> float:
        return self._pooled_trials

    @property
    def pooled_alpha(self) -> float:
        """alpha over every request seen, itself shrunk toward `prior_alpha`."""
        return shrunk(self._pooled_successes, self._pooled_trials, self.prior_alpha, self.prior_strength)

    def alpha(self, request_id: int) -> float:
        counts = self._requests.get(request_id)
        if counts is None:
            return self.pooled_alpha
        return shrunk(counts.successes, counts.trials, self.pooled_alpha, self.prior_strength)


@dataclass
class RecentAcceptance:
    """One drafter's alpha over the batch's recent forwards: each forward's trials weigh
    2^(-age / half_life), age counted in the forwards this drafter drafted; shrunk toward
    `prior_alpha` (its profiled acceptance) as `prior_strength` pseudo-trials."""

    prior_alpha: float
    prior_strength: float = 4.0
    half_life: float = 4.0
    successes: float = 0.0
    trials: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.prior_alpha <= 1.0:
            raise ValueError(f"prior_alpha must be in [0, 1], got {self.prior_alpha}")
        if self.half_life <= 0:
            raise ValueError(f"half_life must be > 0, got {self.half_life}")

    def record(self, drafted: Sequence[int], accepted: Sequence[int]) -> None:
        """One forward: draft tokens verified and accepted, per request."""
        keep = 0.5 ** (1.0 / self.half_life)
        self.successes = keep * self.successes + sum(a for d, a in zip(drafted, accepted) if d > 0)
        self.trials = keep * self.trials + sum(num_trials(d, a) for d, a in zip(drafted, accepted) if d > 0)

    @property
    def alpha(self) -> float:
        return shrunk(self.successes, self.trials, self.prior_alpha, self.prior_strength)


def num_trials(drafted: int, accepted: int) -> int:
    """Bernoulli trials a draft of `drafted` tokens with `accepted` accepted observed: the accepted
    ones, and the first rejection if there was one."""
    return accepted + (1 if accepted < drafted else 0)


def shrunk(successes: float, trials: float, prior_mean: float, prior_strength: float) -> float:
    """Posterior mean of a Beta(prior_strength * prior_mean, prior_strength * (1 - prior_mean)) prior."""
    if trials + prior_strength == 0:
        return prior_mean
    return (successes + prior_strength * prior_mean) / (trials + prior_strength)
