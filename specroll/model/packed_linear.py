"""Linear layers on the CPU with their weights packed once for oneDNN's bf16 kernels.

torch's `F.linear` in bf16 on a CPU calls oneDNN with a plain (N, K) weight, which oneDNN reorders
into its blocked layout on every call. Packed once at load (`torch.ops.mkldnn._reorder_linear_weight`,
what vLLM's CPU build and torch's own inductor do), a call only streams the packed weight: measured on
an AMD EPYC with AVX512-BF16, one thread, SmolLM2's 576 -> 1536 layer took 40 us for one row and
63 us for 8 packed, 72 and 94 us through `F.linear`, and its 576 -> 49,152 LM head 1.4 and 2.3 ms
against 3.4 and 4.2 ms.

A packed call gives the same bits as `F.linear` on the plain weight wherever the batch-invariance
probe finds so (`batch_invariant.invariant_row_sizes(..., packed=True)`): that is what lets the
trainer, which differentiates through `F.linear`, compute the engine's log-probabilities to the bit.
The packed tensor is a copy: the plain weight stays the parameter (state dicts, the trainer, tied
embeddings, a draft head reading the LM head), and `repack` refreshes the copy after new weights.
"""

from __future__ import annotations

import functools
import os

import torch

from specroll.cpu_env import host_cpu_flags

PACKED_DTYPES = (torch.bfloat16,)


@functools.cache
def can_pack(dtype: torch.dtype, device_type: str) -> bool:
    """Whether torch's oneDNN packs a `dtype` linear weight on this device: bf16 on a CPU with
    AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT, asked of oneDNN itself rather than guessed from flags."""
    if device_type != "cpu" or dtype not in PACKED_DTYPES or not torch.backends.mkldnn.is_available():
        return False
    try:
        probe = pack(torch.zeros(16, 16, dtype=dtype))
        linear(torch.zeros(1, 16, dtype=dtype), probe, None)
    except RuntimeError:
        return False
    return True


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight (N, K) -> an opaque oneDNN tensor of the same values in its blocked layout (no batch
    size hint: the layout must not depend on the calls to come)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (..., K) @ W.T + bias -> (..., N), W given packed (`pack`); no gradient."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def bf16_kernels() -> str:
    """Which of oneDNN's bf16 code paths this CPU runs, which decides a bf16 row's bits as MKL's
    branch decides an fp32 one's: AMX tiles, AVX512-BF16 dot products, or (neither) bf16 converted
    to fp32 in AVX-512; a `ONEDNN_MAX_CPU_ISA` set by the user is named as it is."""
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA")
    if capped:
        return f"oneDNN capped at {capped}"
    flags = host_cpu_flags()
    if "amx_bf16" in flags:
        return "oneDNN AMX-BF16"
    return "oneDNN AVX512-BF16" if "avx512_bf16" in flags else "oneDNN without bf16 instructions"
