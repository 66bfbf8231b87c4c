"""Expected output tokens per verification for a per-token acceptance probability.

Glossary: `alpha` is the probability that the target accepts one drafted token given all earlier
drafted tokens were accepted (i.i.d. acceptance, Leviathan et al. 2023, §3.1); `draft_len` (k) is
the number of drafted tokens verified in one forward. Output tokens of one forward are the accepted
drafts plus the one token the target always adds (a correction or the bonus token).
"""

from __future__ import annotations

import numpy as np

_NEAR_ONE = 1.0 - 1e-9


def expected_tokens_per_forward(alpha: np.ndarray | float, draft_len: np.ndarray | int) -> np.ndarray:
    """(1 - alpha^(k+1)) / (1 - alpha): expected output tokens of one coupled draft-verify round."""
    a = np.minimum(np.asarray(alpha, dtype=np.float64), _NEAR_ONE)
    k = np.asarray(draft_len, dtype=np.float64)
    return (1.0 - a ** (k + 1.0)) / (1.0 - a)


def decoupled_expected_tokens(alpha: np.ndarray | float, window: np.ndarray | int) -> np.ndarray:
    """SpecActor §4.1 tau_w: expected tokens per window under decoupled drafting.

    tau_w = sum_{a<w} p^a (1-p) (a+1)/2 + w p^w. The (a+1)/2 factor is the paper's charge for the
    tokens the drafter ran ahead on and must throw away after a rejection at position a.
    """
    p = np.minimum(np.asarray(alpha, dtype=np.float64), _NEAR_ONE)
    w = np.asarray(window, dtype=np.int64)
    max_w = int(np.max(w)) if w.size else 0
    total = np.zeros(np.broadcast(p, w).shape)
    for a in range(max_w):
        partial = p**a * (1.0 - p) * (a + 1) / 2.0
        total = total + np.where(a < w, partial, 0.0)
    return total + w * p**w


def alpha_from_acceptance_length(acceptance_length: float, draft_len: int) -> float:
    """Invert expected_tokens_per_forward: the alpha whose mean acceptance length is the one given.

    Acceptance length counts the bonus token, as in Seer Table 2; bisection on a monotone function.
    """
    if not 1.0 <= acceptance_length <= draft_len + 1:
        raise ValueError(f"acceptance length {acceptance_length} outside [1, {draft_len + 1}]")
    low, high = 0.0, _NEAR_ONE
    for _ in range(60):
        mid = 0.5 * (low + high)
        if float(expected_tokens_per_forward(mid, draft_len)) < acceptance_length:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)
