"""The names of exact mode's sampling rules, in one place. Imports nothing.

Exact mode fixes the target's token at every output position by keyed noise; a rule says how that
noise draws the token (`specroll.sampling`): `inverse-cdf` inverts the CDF, in vocabulary order, at
one uniform; `gumbel` draws in two stages, the top candidates racing with Gumbel noise. Either is
exact; they give different tokens, and a coupled drafter must follow the target's.
"""

from __future__ import annotations

INVERSE_CDF = "inverse-cdf"
GUMBEL = "gumbel"
SAMPLING_RULES = (INVERSE_CDF, GUMBEL)
DEFAULT_SAMPLING_RULE = INVERSE_CDF


def check_rule(rule: str) -> None:
    if rule not in SAMPLING_RULES:
        raise ValueError(f"sampling rule must be one of {', '.join(SAMPLING_RULES)}, got {rule!r}")
