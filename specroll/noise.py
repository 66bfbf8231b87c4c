"""Counter-based random numbers: the uniform for (seed, request, position, stream) is a pure hash.

A request's randomness at output position t therefore never depends on which other requests share
its batch, on the worker, on scheduling or on the drafter, which is what lets exact-mode
speculative rollouts reproduce plain rollouts token for token. The hash is SplitMix64's finaliser
(Steele, Lea and Flood 2014) over 64-bit words with wrap-around arithmetic, in torch's int64 on the
keys' device: addition and multiplication wrap in two's complement, which is uint64 arithmetic on the
same bits, and a logical right shift is an arithmetic one with the sign's copies masked off. So the
uniforms are computed where the logits are (no host round trip) and are the same bits on every device
(tested against a pure-integer reference).
"""

from __future__ import annotations

import torch

STREAM_SAMPLE = 0  # the target's draw at a position (plain, bonus and recovered tokens)
STREAM_ACCEPT = 1  # rejection sampling's accept/reject coin
STREAM_DRAFT = 2  # a sampling drafter's own draws, independent of the target's
STREAM_GUMBEL = 3  # the Gumbel noise of each (position, token) under the gumbel sampling rule


def _signed(word: int) -> int:
    """A 64-bit word as the int64 with the same bits (two's complement)."""
    word &= (1 << 64) - 1
    return word - (1 << 64) if word >= 1 << 63 else word


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MUL1 = _signed(0xBF58476D1CE4E5B9)
_MUL2 = _signed(0x94D049BB133111EB)


def _shift_right(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> on int64 is arithmetic: mask the sign's copies)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ _shift_right(x, 30)).mul_(_MUL1)
    x = (x ^ _shift_right(x, 27)).mul_(_MUL2)
    return x.bitwise_xor_(_shift_right(x, 31))


def _mix_int(x: int) -> int:
    """`_mix` on a Python integer (a key known on the host needs no tensor)."""
    mask = (1 << 64) - 1
    x &= mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def hash64(*keys: torch.Tensor | int, device: torch.device) -> torch.Tensor:
    """Combine integer keys (broadcast together) into one well-mixed 64-bit word per element, held
    as int64 (its bits are SplitMix64's uint64). Leading integer keys are mixed on the host."""
    state = 0
    while keys and not isinstance(keys[0], torch.Tensor):
        state, keys = _mix_int(state + 0x9E3779B97F4A7C15 + int(keys[0])), keys[1:]
    out = torch.full((), _signed(state), dtype=torch.int64, device=device)
    for key in keys:
        key = key.to(device=device, dtype=torch.int64) if isinstance(key, torch.Tensor) else _signed(int(key))
        out = _mix(out + _GOLDEN + key)
    return out


def uniforms(seed: int, request_ids: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """One float64 in the open interval (0, 1) per (request, position), on their device; the shape
    of the broadcast inputs."""
    bits = _shift_right(
        hash64(seed, request_ids, positions, stream, device=request_ids.device), 11
    )  # 53 bits
    return (bits.to(torch.float64) + 0.5) * 2.0**-53


def gumbels(
    seed: int, request_ids: torch.Tensor, positions: torch.Tensor, token_ids: torch.Tensor
) -> torch.Tensor:
    """Standard Gumbel noise keyed by (seed, request, position, token), float64, the broadcast shape:
    -log(-log u) of `uniforms` in the token's own stream, so a token's noise is the same for every
    distribution it is drawn from (the target's and a drafter's)."""
    bits = _shift_right(
        hash64(seed, request_ids, positions, STREAM_GUMBEL, token_ids, device=request_ids.device), 11
    )
    u = (bits.to(torch.float64) + 0.5) * 2.0**-53
    return -torch.log(-torch.log(u))
