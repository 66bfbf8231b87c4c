"""The CPU numerics exact mode pins before the process's first tensor operation: which code branch
Intel MKL's GEMMs take and which instruction set ATen's own kernels use. torch-free, because it must
run before torch computes anything (`specroll/__init__.py` calls `pin`).

Both choices decide a row's bits, so both are fixed to one branch where the CPU allows it:

- MKL in strict conditional numerical reproducibility on its AVX2 branch (`MKL_CBWR=AVX2,STRICT`).
  Strict makes a GEMM's bits independent of its thread count and buffers; the AVX2 branch makes them
  the same on every Intel CPU with AVX2, with or without AVX-512. Left to choose (`AUTO`), MKL runs
  its AVX-512 branch on an AVX-512 Xeon, whose two-thread GEMMs rounded some of the engine's call
  shapes differently from run to run there: speculative and plain decoding then differed. MKL
  honours a named branch on Intel CPUs only; elsewhere (AMD) it runs its AUTO branch, as its
  documentation says, and `model.blas_mode.describe` reports which one ran.
- ATen's vectorised kernels (softmax, exp, reductions) at AVX2 (`ATEN_CPU_CAPABILITY=avx2`). torch
  picks AVX-512 kernels where the CPU has them, whose results differ in the last bits from the AVX2
  ones: measured on an AMD EPYC with AVX-512, a SmolLM2 rollout's records changed between the two.
  Pinned, an AVX2 machine and an AVX-512 one run the same kernels.

A variable the user set is kept. Both are read at their library's first use, so a process that ran
a tensor operation before importing specroll keeps what it had; `model.blas_mode.describe` reads
what is in force.
"""

from __future__ import annotations

import os
import platform
from collections.abc import MutableMapping

MKL_MODE = "AVX2,STRICT"
ATEN_CAPABILITY = "avx2"
_X86 = {"x86_64", "amd64"}


def pin(environ: MutableMapping[str, str] | None = None, cpu_flags: frozenset[str] | None = None) -> None:
    """Set MKL's and ATen's numerics in `environ` (the process's) unless already set; ATen's only on
    an x86-64 CPU with AVX2 (asking for kernels the CPU lacks would stop the process)."""
    environ = os.environ if environ is None else environ
    environ.setdefault("MKL_CBWR", MKL_MODE)
    flags = host_cpu_flags() if cpu_flags is None else cpu_flags
    if "avx2" in flags:
        environ.setdefault("ATEN_CPU_CAPABILITY", ATEN_CAPABILITY)


def host_cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (Linux's /proc/cpuinfo) where it is x86-64; else none."""
    if platform.machine().lower() not in _X86:
        return frozenset()
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())
