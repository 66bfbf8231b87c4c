"""DAS length-aware speculative budgets (§4.2).

Forward latency is affine in processed tokens, t_fwd = c_base + c_tok n_toks (eq. 1). Request i of
(remaining) length l_i, drafter capacity k_i (the largest fraction of its tokens a drafter can supply)
and accept efficiency a_i, given p_i drafted tokens, accepts A_i = k_i l_i (1 - exp(-a_i p_i / l_i))
(eq. 3) and so needs l_i - A_i forwards (eq. 4). Minimising c_base N_fwd + c_tok sum p_i (eq. 6) with
the constraint tight for every request that drafts gives

    exp(-a_i p_i / l_i) = 1 - (1 - N_fwd / l_i) / k_i
    p_i* = -(l_i / a_i) ln(1 - (1 - N_fwd / l_i) / k_i)  for l_i > N_fwd, else 0

and, differentiating c_base N + c_tok sum p_i*(N), the optimal N_fwd solves

    c_base = c_tok sum_{l_i > N} 1 / (a_i (k_i - 1 + N / l_i)).

The paper prints eq. 7 as ln(1 - k_i (1 - N/l_i)) and eq. 9 to match; solving its own eq. 4 for p_i
gives the form above, whose budget grows without bound as N_fwd approaches l_i (1 - k_i), the fewest
forwards a request can take. The printed form stays finite there and, once N_fwd is pinned to that
floor, hands the longest requests budgets below one draft per forward (the simulator then drafted
nothing). N_fwd therefore lies in [max_i l_i (1 - k_i), max_i l_i].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_FLOOR_MARGIN = 1e-9  # keeps the logarithm finite at N_fwd = l_i (1 - k_i)


def min_num_forwards(lengths: np.ndarray, capacity: np.ndarray) -> float:
    """The fewest forwards the batch can take: every drafter supplies its full capacity."""
    return float(np.max(lengths * (1.0 - capacity))) if len(lengths) else 0.0


def optimal_num_forwards(
    lengths: np.ndarray, capacity: np.ndarray, efficiency: np.ndarray, c_base: float, c_tok: float
) -> float:
    """Solve the optimality condition for N_fwd by bisection; its right side falls as N grows."""
    lengths = np.asarray(lengths, dtype=np.float64)
    if not len(lengths):
        return 0.0
    low, high = min_num_forwards(lengths, capacity), float(np.max(lengths))
    for _ in range(60):
        mid = 0.5 * (low + high)
        if _marginal(mid, lengths, capacity, efficiency, c_base, c_tok) < 0:
            low = mid  # one more forward still saves more token cost than it adds base cost
        else:
            high = mid
    return high


def _marginal(n_fwd: float, lengths, capacity, efficiency, c_base: float, c_tok: float) -> float:
    """d J / d N_fwd: base cost of one more forward minus the drafted-token cost it saves."""
    active = lengths > n_fwd
    slack = np.maximum(capacity - 1.0 + n_fwd / np.maximum(lengths, 1e-9), _FLOOR_MARGIN)
    return c_base - c_tok * float(np.sum(np.where(active, 1.0 / (efficiency * slack), 0.0)))


def optimal_budgets(
    lengths: np.ndarray, capacity: np.ndarray, efficiency: np.ndarray, n_fwd: float
) -> np.ndarray:
    """Drafted tokens per request that finish it in n_fwd forwards (0 if it needs no speculation)."""
    lengths = np.asarray(lengths, dtype=np.float64)
    active = lengths > n_fwd
    inner = 1.0 - (1.0 - n_fwd / np.maximum(lengths, 1e-9)) / capacity
    budget = -(lengths / efficiency) * np.log(np.clip(inner, _FLOOR_MARGIN, None))
    return np.where(active, budget, 0.0)


def draft_lengths(budgets: np.ndarray, n_fwd: float, max_draft: int) -> np.ndarray:
    """Per-forward draft length that spends each budget over the request's forwards.

    A request with a budget finishes in exactly n_fwd forwards (the constraint is tight), so it drafts
    p_i / n_fwd tokens per forward, rounded to the nearest whole draft.
    """
    per_forward = np.asarray(budgets, dtype=np.float64) / max(n_fwd, 1.0)
    return np.clip(np.rint(per_forward), 0, max_draft).astype(np.int64)


@dataclass(frozen=True)
class LengthClasses:
    """DAS §4.2.3 length-class policy: Short skips speculation, Medium and Long draft more."""

    medium_from: int  # predicted length (tokens) at which a request counts as Medium
    long_from: int
    medium_draft: int
    long_draft: int

    def __post_init__(self) -> None:
        if not 0 < self.medium_from <= self.long_from:
            raise ValueError("need 0 < medium_from <= long_from")

    def draft_len(self, predicted_length: np.ndarray) -> np.ndarray:
        predicted = np.asarray(predicted_length)
        return np.where(
            predicted >= self.long_from,
            self.long_draft,
            np.where(predicted >= self.medium_from, self.medium_draft, 0),
        )
