"""Which of torch's fused attention kernels a CPU forward (and its backward) may run.

torch's CPU flash attention packs bf16 and fp16 keys and values for AMX (`at::vec::pack_vnni2`)
wherever the CPU has AMX tiles, but that packing is compiled only into its AVX-512 kernels: in its
AVX2 kernels it raises "pack_vnni2 is only supported when avx512 is supported". specroll pins ATen
to its AVX2 kernels (`specroll.cpu_env`, so that fp32 records are the same on AVX2 and AVX-512
machines), and on an AMX Xeon that made every bf16 `scaled_dot_product_attention` fail, the fast
numerics' forward and the trainer's backward alike. There, and only there, attention runs torch's
math kernel (matmuls and a softmax, no packing); elsewhere the fused kernel runs as before.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from specroll.cpu_env import host_cpu_flags

_AMX_FLAGS = frozenset({"amx_tile", "amx_bf16", "amx_fp16"})
_PACKED_DTYPES = (torch.bfloat16, torch.float16)


def flash_would_fail(dtype: torch.dtype, cpu_flags: frozenset[str], capability: str) -> bool:
    """Whether torch's CPU flash attention would reach its AMX packing in a kernel built without
    it: a 16-bit dtype, AMX tiles on the CPU, and ATen's kernels below AVX-512 (`capability` as
    `torch.backends.cpu.get_cpu_capability()` names it: "AVX2", "AVX512", ...)."""
    has_amx = bool(cpu_flags & _AMX_FLAGS)
    return dtype in _PACKED_DTYPES and has_amx and not capability.upper().startswith("AVX512")


@functools.cache
def _flash_would_fail_here(dtype: torch.dtype) -> bool:
    return flash_would_fail(dtype, host_cpu_flags(), torch.backends.cpu.get_cpu_capability())


def attention_backends(q: torch.Tensor) -> contextlib.AbstractContextManager:
    """The context an `F.scaled_dot_product_attention` over `q` runs in: torch's math kernel where
    the fused one would fail (`flash_would_fail`), else no restriction."""
    # fp32, and every GPU, decided before the cached call: a compiled forward traces no cache
    if q.device.type == "cpu" and q.dtype in _PACKED_DTYPES and _flash_would_fail_here(q.dtype):
        return sdpa_kernel([SDPBackend.MATH])
    return contextlib.nullcontext()
