"""Counter-based random numbers: the uniform for (seed, request, position, stream) is a pure hash.

A request's randomness at output position t therefore never depends on which other requests share
its batch, on the worker, on scheduling or on the drafter, which is what lets exact-mode
speculative rollouts reproduce plain rollouts token for token. The hash is SplitMix64's finaliser
(Steele, Lea and Flood 2014), evaluated in int64 with wrap-around multiplication.
"""

from __future__ import annotations

import torch

_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64
_MUL1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MUL2 = -7723592293110705685  # 0x94D049BB133111EB

STREAM_SAMPLE = 0  # the target's draw at a position (plain, bonus and recovered tokens)
STREAM_ACCEPT = 1  # rejection sampling's accept/reject coin
STREAM_DRAFT = 2  # a sampling drafter's own draws, independent of the target's


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical (unsigned) right shift of int64 values."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ _shift_right(x, 30)) * _MUL1
    x = (x ^ _shift_right(x, 27)) * _MUL2
    return x ^ _shift_right(x, 31)


def hash64(*keys: torch.Tensor | int) -> torch.Tensor:
    """Combine integer keys (broadcast together) into one well-mixed int64 per element."""
    state = torch.tensor(0, dtype=torch.int64)
    for key in keys:
        state = _mix(state + _GOLDEN + torch.as_tensor(key, dtype=torch.int64))
    return state


def uniforms(seed: int, request_ids: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """One float64 in the open interval (0, 1) per (request, position); shape of the broadcast inputs."""
    bits = _shift_right(hash64(seed, request_ids, positions, stream), 11)  # 53 random bits
    return (bits.to(torch.float64) + 0.5) * 2.0**-53
