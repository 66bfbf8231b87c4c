"""Whether an exploratory forward pays for itself over the work still left. Imports no torch.

`auto` runs forwards it predicts to be slower than its plan (a warm-up draft, a tree budget whose
acceptance is unmeasured, a cap or a plain forward not yet timed), because a prediction corrects
itself only by being measured. What a measurement buys is used only on the work that follows it: on
a long rollout a few slow forwards are repaid many times over, on a short one (48 tokens at batch 8 is
~48 forwards in all) they are not. So each probe is priced against the horizon:

- price: a probe forward takes its predicted seconds, of which seconds * (1 - rate / best_rate) are
  lost beside the plan it replaces (its tokens would have come faster under the plan), once for each
  of the forwards its measurement still takes;
- value: the rate the measurement may reveal (`prospect_rate`) is a prediction, taken as normal
  around itself with relative spread `spread`; the expected improvement over the plan,
  E[max(0, R - best_rate)] (Jones, Schonlau & Welch 1998, eq. 15), as a share of best_rate, is what
  the chance that it is better times its gain is worth a second, over the seconds of work left once
  it is measured.

A probe runs where its value exceeds its price. The work left is the batch's and the queue's
(`seconds_left`); a view that does not say its queue (`BatchView.num_waiting` None; the engine and the
simulator both say theirs) may have any amount behind the batch, so it explores as without a horizon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specroll.policies.base import BatchView
from specroll.policies.remaining_lengths import expected_remaining


@dataclass(frozen=True)
class Probe:
    """An exploratory forward, as its predictions price it."""

    seconds: float  # one probe forward's predicted seconds
    rate: float  # its predicted tokens a second
    prospect_rate: float  # the predicted rate of what it measures (the best draft a warm-up may unlock)
    num_forwards: float = 1.0  # probe forwards its measurement still takes

    def __post_init__(self) -> None:
        if self.seconds < 0 or self.rate < 0 or self.prospect_rate < 0 or self.num_forwards < 0:
            raise ValueError(f"a probe's seconds, rates and forwards must be >= 0, got {self}")


def expected_gain(prospect_rate: float, best_rate: float, spread: float) -> float:
    """E[max(0, R - best_rate)] / best_rate for R ~ Normal(prospect_rate, (spread * prospect_rate)^2):
    the chance the prospect beats the plan times by how much, as a share of the plan's rate."""
    if best_rate <= 0:
        return math.inf
    sigma = spread * prospect_rate
    if sigma <= 0:
        return max(0.0, prospect_rate - best_rate) / best_rate
    z = (prospect_rate - best_rate) / sigma
    density = math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    below = 0.5 * math.erfc(-z / math.sqrt(2.0))  # the standard normal's CDF at z
    return (sigma * density + (prospect_rate - best_rate) * below) / best_rate


def probe_price(probe: Probe, best_rate: float) -> float:
    """Seconds the probe's forwards lose beside the plan: each takes `seconds`, and its tokens would
    have taken rate / best_rate of that under the plan."""
    if best_rate <= 0:
        return 0.0
    return probe.num_forwards * probe.seconds * max(0.0, 1.0 - probe.rate / best_rate)


def is_worth_probing(probe: Probe, best_rate: float, seconds_left: float, spread: float) -> bool:
    """Whether the probe's expected gain over the work left after it exceeds its price."""
    if math.isinf(seconds_left):
        return True
    price = probe_price(probe, best_rate)
    usable = max(0.0, seconds_left - probe.num_forwards * probe.seconds)
    return usable * expected_gain(probe.prospect_rate, best_rate, spread) > price


def horizon_tokens(batch: BatchView) -> float:
    """The tokens the engine's work has left, in the units `auto`'s rates count: the batch's expected
    remaining tokens and the queue's requests at a typical length; in a drain (nothing queued), the
    batch size times the remaining tokens of the request that goes furthest (`auto.draining_tokens`
    counts a drain's tokens by that request's pace). Infinite where the queue is not reported."""
    if batch.num_waiting is None:
        return math.inf
    views = batch.requests
    finished = np.asarray(batch.finished_lengths, dtype=np.int64)
    remaining = expected_remaining(
        [v.num_output_tokens for v in views], [v.num_remaining for v in views], finished
    )
    if batch.drains:
        return batch.batch_size * float(remaining.max(initial=0.0))
    return float(remaining.sum()) + batch.num_waiting * _typical_length(batch, finished)


def seconds_left(batch: BatchView, best_rate: float) -> float:
    """Seconds the work left takes at the plan's rate (`horizon_tokens`)."""
    tokens = horizon_tokens(batch)
    return math.inf if math.isinf(tokens) or best_rate <= 0 else tokens / best_rate


def _typical_length(batch: BatchView, finished: np.ndarray) -> float:
    """A queued request's expected output: the mean finished length, else the longest budget in the
    batch (a request admitted fresh has the whole of max_tokens before it)."""
    if len(finished):
        return float(finished.mean())
    return float(max((v.num_output_tokens + v.num_remaining for v in batch.requests), default=0))
