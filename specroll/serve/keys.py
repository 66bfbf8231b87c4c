"""The keys that make a served choice replayable: its seed, its noise key and its group. Pure Python.

Exact mode draws output position t of a request from the uniform keyed by (engine seed, noise key, t)
(`specroll.noise`). A served choice's noise key is a hash of (request seed, choice index) alone, so its
tokens depend on the weights, the prompt's tokens, the sampling settings, the seed and the index, and
never on the ids the server assigns, on what else runs beside it, or on speculation.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence

SEED_BITS = 53  # a drawn seed stays an exact integer in every JSON reader (IEEE doubles)
_KEY_MASK = (1 << 63) - 1  # keys are non-negative int64 values


def draw_seed() -> int:
    """A seed for a request that gave none (returned with the response, so it can be replayed)."""
    return secrets.randbits(SEED_BITS)


def _hash63(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") & _KEY_MASK


def noise_key(seed: int, sample_index: int) -> int:
    """The noise key of choice `sample_index` of a request seeded `seed`: blake2b-64 of
    "seed:index", the top bit cleared."""
    return _hash63(f"specroll-choice:{seed}:{sample_index}")


def group_key(prompt_token_ids: Sequence[int]) -> int:
    """The group of every choice drawn for these prompt tokens (sibling drafting reads its group's
    responses; history drafting, the group's responses under earlier weight versions)."""
    return _hash63("specroll-group:" + ",".join(map(str, prompt_token_ids)))
