"""Expected tokens of one verification forward under i.i.d. acceptance. Imports no torch.

Glossary: `alpha` is the probability that the target accepts one draft token given that every draft
token before it was accepted (Leviathan et al. 2023, §3.1); `k` is the number of draft tokens the
forward verifies. A forward emits the accepted drafts plus the one token the target always adds (a
correction, or the bonus token when every draft was accepted), so in expectation

    E(alpha, k) = sum_{i=0..k} alpha^i = (1 - alpha^(k+1)) / (1 - alpha).

The engine's policies, the simulator and the placement model all use this one function.
"""

from __future__ import annotations

import numpy as np


def expected_tokens(alpha: float | np.ndarray, k: int | np.ndarray) -> float | np.ndarray:
    """E(alpha, k) for scalars (a float back) or arrays that broadcast (an array back)."""
    a = np.asarray(alpha, dtype=np.float64)
    n = np.asarray(k, dtype=np.float64)
    if np.any((a < 0.0) | (a > 1.0)):
        raise ValueError(f"acceptance probability must be in [0, 1], got {alpha}")
    is_one = a == 1.0
    safe = np.where(is_one, 0.5, a)  # the closed form divides by 1 - alpha
    value = np.where(is_one, n + 1.0, (1.0 - safe ** (n + 1.0)) / (1.0 - safe))
    return float(value) if value.ndim == 0 else value


def alpha_from_acceptance_length(acceptance_length: float, k: int) -> float:
    """The alpha whose E(alpha, k) is the given mean acceptance length (which counts the bonus
    token, as in Seer Table 2); bisection, since E grows with alpha."""
    if not 1.0 <= acceptance_length <= k + 1:
        raise ValueError(f"acceptance length {acceptance_length} outside [1, {k + 1}]")
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if expected_tokens(mid, k) < acceptance_length else (low, mid)
    return 0.5 * (low + high)
