"""DAS length-aware speculative budgets (§4.2).

Forward latency is affine in processed tokens, t_fwd = c_base + c_tok n_toks (eq. 1). With request i
of length l_i, drafter capacity k_i (the largest fraction of its tokens a drafter can supply) and
accept efficiency a_i, proposing p_i tokens leaves l_i (1 - k_i + k_i exp(-a_i p_i / l_i)) forwards
(eq. 3-4). Minimising c_base N_fwd + c_tok sum p_i (eq. 6) gives, for a chosen N_fwd,

    p_i* = -(l_i / a_i) ln(1 - k_i (1 - N_fwd / l_i))  for l_i > N_fwd, else 0      (eq. 7)

and the optimal N_fwd solves c_base = c_tok sum_{l_i > N} k_i / (a_i (1 - k_i + k_i N / l_i)) (eq. 9).
Long requests get large budgets; requests shorter than N_fwd skip speculation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def optimal_num_forwards(
    lengths: np.ndarray, capacity: np.ndarray, efficiency: np.ndarray, c_base: float, c_tok: float
) -> float:
    """Solve eq. 9 for N_fwd by bisection; its left side grows with N (fewer terms, smaller ones)."""
    lengths = np.asarray(lengths, dtype=np.float64)
    low = float(np.max(lengths * (1.0 - capacity))) if len(lengths) else 0.0
    high = float(np.max(lengths)) if len(lengths) else 0.0
    for _ in range(50):
        mid = 0.5 * (low + high)
        if _marginal(mid, lengths, capacity, efficiency, c_base, c_tok) < 0:
            low = mid
        else:
            high = mid
    return high


def _marginal(n_fwd: float, lengths, capacity, efficiency, c_base: float, c_tok: float) -> float:
    active = lengths > n_fwd
    denom = efficiency * (1.0 - capacity + capacity * n_fwd / np.maximum(lengths, 1e-9))
    return c_base - c_tok * float(np.sum(np.where(active, capacity / denom, 0.0)))


def optimal_budgets(
    lengths: np.ndarray, capacity: np.ndarray, efficiency: np.ndarray, n_fwd: float
) -> np.ndarray:
    """Eq. 7: proposed tokens per request (drafted and not) for the given number of forwards."""
    lengths = np.asarray(lengths, dtype=np.float64)
    active = lengths > n_fwd
    inner = 1.0 - capacity * (1.0 - n_fwd / np.maximum(lengths, 1e-9))
    budget = -(lengths / efficiency) * np.log(np.clip(inner, 1e-12, None))
    return np.where(active, budget, 0.0)


def draft_lengths(budgets: np.ndarray, lengths: np.ndarray, n_fwd: float, max_draft: int) -> np.ndarray:
    """Per-forward draft length that spends each budget over the request's forwards.

    A request proposes p_i tokens in about min(l_i, N_fwd) forwards, one of them the target's own.
    """
    forwards = np.maximum(np.minimum(lengths, n_fwd), 1.0)
    per_forward = budgets / forwards - 1.0
    return np.clip(np.ceil(per_forward), 0, max_draft).astype(np.int64)


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
