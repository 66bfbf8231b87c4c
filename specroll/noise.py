"""Counter-based random numbers: the uniform for (seed, request, position, stream) is a pure hash.

A request's randomness at output position t therefore never depends on which other requests share
its batch, on the worker, on scheduling or on the drafter, which is what lets exact-mode
speculative rollouts reproduce plain rollouts token for token. The hash is SplitMix64's finaliser
(Steele, Lea and Flood 2014) over 64-bit words with wrap-around arithmetic. It runs in NumPy's
uint64, where wrap-around and logical shifts are native: a verification step hashes a few hundred
keys, for which NumPy's per-call cost is a fraction of torch's.
"""

from __future__ import annotations

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)

STREAM_SAMPLE = 0  # the target's draw at a position (plain, bonus and recovered tokens)
STREAM_ACCEPT = 1  # rejection sampling's accept/reject coin
STREAM_DRAFT = 2  # a sampling drafter's own draws, independent of the target's


def _words(key) -> np.ndarray:
    """An integer key (int, array or tensor) as 64-bit words; negative values in two's complement."""
    if isinstance(key, torch.Tensor):
        key = key.numpy()
    return np.atleast_1d(np.asarray(key, dtype=np.int64)).view(np.uint64)


def _mix(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * _MUL1
    x = (x ^ (x >> np.uint64(27))) * _MUL2
    return x ^ (x >> np.uint64(31))


def hash64(*keys) -> np.ndarray:
    """Combine integer keys (broadcast together) into one well-mixed uint64 per element."""
    state = np.zeros(1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for key in keys:
            state = _mix(state + _GOLDEN + _words(key))
    return state


def uniforms(seed: int, request_ids, positions, stream: int) -> torch.Tensor:
    """One float64 in the open interval (0, 1) per (request, position); shape of the broadcast inputs."""
    shape = np.broadcast_shapes(np.shape(request_ids), np.shape(positions))
    bits = hash64(seed, request_ids, positions, stream) >> np.uint64(11)  # 53 random bits
    return torch.from_numpy((bits.astype(np.float64) + 0.5) * 2.0**-53).reshape(shape)
