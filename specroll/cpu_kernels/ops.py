"""specroll's CPU kernels as the model calls them, with the signatures of the GPU's invariant kernels
(`specroll.kernels`): a `PackedLinear` per linear layer, `rms_norm`, `add_rms_norm`, `attention`,
`silu_mul`, all bf16.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F

from specroll.cpu_kernels.build import load


def module():
    """The compiled kernels; a RuntimeError with the reason where they cannot run here."""
    compiled, reason = load()
    if compiled is None:
        raise RuntimeError(f"specroll's CPU kernels cannot run here: {reason}")
    return compiled


TILE_BLOCKS = 4  # blocks of 16 outputs a tile streams together (`kTileBlocks` in csrc/linear.h)


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight (N, K) bf16 -> (ceil(N/16), ceil(K/2), 16) int32 holding, for each block of 16 outputs
    and each pair of inputs, the 16 outputs' (even | odd << 16) weights, the 64 bytes a pair step
    loads; tiles of TILE_BLOCKS blocks (the last one what is left) interleaved pair by pair, so a
    tile is one sequential stream. Zero rows and a zero column pad N and K; zeros add nothing."""
    N, K = weight.shape
    padded = F.pad(weight.detach().to(torch.bfloat16), (0, K % 2, 0, -N % 16))
    num_blocks, pairs = padded.shape[0] // 16, padded.shape[1] // 2
    blocks = padded.reshape(num_blocks, 16, pairs, 2).permute(0, 2, 1, 3).contiguous().view(torch.int32)
    blocks = blocks.reshape(num_blocks, pairs, 16)  # (block, pair, lane)
    full = num_blocks // TILE_BLOCKS * TILE_BLOCKS
    tiles = blocks[:full].reshape(-1, TILE_BLOCKS, pairs, 16).transpose(1, 2)  # (tile, pair, block, lane)
    tail = blocks[full:].transpose(0, 1)  # (pair, block, lane)
    return torch.cat([tiles.reshape(-1), tail.reshape(-1)]).reshape(num_blocks, pairs, 16)


@functools.cache
def native_bf16() -> bool:
    """Whether the CPU's VDPBF16PS runs the pair steps (`linear.h`); else AVX-512F multiply-adds
    compute the instruction's definition, the same bits. Decided by the CPU's flags and a probe
    (`probe.bf16_instruction_agrees`) that the instruction gives its definition's bits here;
    `SPECROLL_CPU_KERNELS=emulated` runs the definition wherever (the tests compare the two)."""
    from specroll.cpu_env import host_cpu_flags
    from specroll.cpu_kernels.probe import bf16_instruction_agrees

    if os.environ.get("SPECROLL_CPU_KERNELS", "").lower() == "emulated":
        return False
    return "avx512_bf16" in host_cpu_flags() and bf16_instruction_agrees()


def linear_packed(
    x: torch.Tensor,
    packed: torch.Tensor,
    bias: torch.Tensor | None,
    out_features: int,
    native: bool,
    fp32_out: bool = False,
) -> torch.Tensor:
    """x (..., K) bf16 @ W.T + bias -> (..., N) bf16 (fp32 sums unrounded, `fp32_out`), W given
    packed (`pack`); `native`: VDPBF16PS runs the pair steps, else their definition in AVX-512F."""
    return module().linear(x, packed, bias, out_features, native, fp32_out)


class PackedLinear:
    """One linear layer's kernel: called as (x, weight, bias) like `F.linear`, it multiplies on the
    weight's packed copy, packed again whenever the weight is another tensor or changed in place
    (new weights from a trainer, `ModelRunner.load_weights`). Holding the weight itself, not its id,
    no other tensor can pass for it."""

    def __init__(self) -> None:
        self._weight: torch.Tensor | None = None
        self._version = -1
        self._packed: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self._weight is not weight or self._version != weight._version or self._packed is None:
            self._packed, self._weight, self._version = pack(weight), weight, weight._version
        return linear_packed(x, self._packed, bias, weight.shape[0], native_bf16())

    def adopt(self, weight: torch.Tensor, packed: torch.Tensor) -> None:
        """Take `packed` (`pack` of weight's current values, made elsewhere, e.g. on another thread)
        as the packed copy of `weight` as it now stands."""
        self._packed, self._weight, self._version = packed, weight, weight._version


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over x's last dimension (`norm.h`)."""
    return module().norm(x, None, weight, eps)[0]


def add_rms_norm(
    x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(s = x + y, RMSNorm(s)) in one pass (`norm.h`)."""
    total, normed = module().norm(x, y, weight, eps)
    return total, normed


def attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    columns: torch.Tensor | None = None,
) -> torch.Tensor:
    """q (b, H, T, D); keys, values (b, Hkv, L, D); mask (b, 1, T, L) True where a query may attend
    (in chain order given `columns` (b, T, L), a tree's) -> (b, H, T, D) (`attention.h`). A wider
    cache (fp32, holding bf16 values widened) is read narrowed: the same values."""
    if keys.dtype != torch.bfloat16:
        keys, values = keys.to(torch.bfloat16), values.to(torch.bfloat16)
    return module().attention(q, keys, values, mask, columns, q.shape[-1] ** -0.5)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up in bf16 (`norm.h`)."""
    return module().silu_mul(gate, up)


class ConcatenatedLinear:
    """Linear layers that read one input (q, k and v; gate and up) made as one call on their weights
    packed side by side, repacked whenever one of them changes: the same bits as each layer alone,
    since every output is its own sequence of pair steps."""

    def __init__(self, *linears: torch.nn.Linear) -> None:
        self._linears = linears
        self._weights: tuple[torch.Tensor, ...] = ()
        self._versions: tuple[int, ...] = ()
        self._packed: torch.Tensor | None = None
        self._bias: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        weights = tuple(linear.weight for linear in self._linears)
        versions = tuple(w._version for w in weights)
        if (
            self._packed is None
            or versions != self._versions
            or any(a is not b for a, b in zip(weights, self._weights))
        ):
            self._packed = pack(torch.cat([w.detach() for w in weights]))
            biases = [linear.bias for linear in self._linears]
            self._bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
            self._weights, self._versions = weights, versions
        return linear_packed(x, self._packed, self._bias, sum(w.shape[0] for w in weights), native_bf16())


def rotary_write(
    qkv: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor],
    keys: torch.Tensor,
    values: torch.Tensor,
    write_index: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
) -> torch.Tensor:
    """qkv (B, T, (H + 2 Hkv) D) -> q (B, H, T, D) rotated, with k rotated and v written to the cache
    tensors `keys`, `values` at `write_index` rows (`rotary.h`)."""
    cos, sin = rope
    return module().rotary_write(qkv, cos, sin, keys, values, write_index, num_heads, num_kv_heads)


def silu_mul_halves(y: torch.Tensor) -> torch.Tensor:
    """y (..., 2I) = [gate | up] -> SiLU(gate) * up (..., I)."""
    return module().silu_mul_halves(y)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws, probs (N, V) float32 or float64, u (N,) -> tokens (N,) int64: the tokens of
    `torch.searchsorted(cumsum(probs.double()), u.double() * total, right=True)`, to the bit, found in
    about one pass a row with nothing written but the token (`csrc/sampling.h`)."""
    return module().inverse_cdf(probs, u)
