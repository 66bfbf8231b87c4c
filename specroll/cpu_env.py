"""The process environment specroll sets before torch starts: the CPU numerics exact mode pins (which
code branch Intel MKL's GEMMs take, which instruction set ATen's own kernels use) and how long an
idle OpenMP thread spins. torch-free, because it must run before torch loads or computes anything
(`specroll/__init__.py` calls `pin`).

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

OpenMP's idle threads spin `GOMP_SPINCOUNT=10000` times before they sleep (libgomp's default is
300,000): where other processes hold the cores, a spinning thread takes a core from the thread the
others wait for. Measured on the 2-core machine beside a one-thread matmul loop, a SmolLM2 rollout
(16 requests x 8 tokens, plain) at two threads took 14-37 s with the default and 12 s with 10,000
(7 s at one thread, which the start-up probe of `engine.threads` picks there); alone, 16 x 32
tokens took 5.7/6.2 s with the default and 6.0/6.3 s with 10,000. OMP_WAIT_POLICY=PASSIVE did as
well under load but cost 17-45 % alone.

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
SPIN_COUNT = "10000"
_X86 = {"x86_64", "amd64"}


def pin(environ: MutableMapping[str, str] | None = None, cpu_flags: frozenset[str] | None = None) -> None:
    """Set MKL's and ATen's numerics and OpenMP's spin in `environ` (the process's) unless already
    set; ATen's only on an x86-64 CPU with AVX2 (asking for kernels the CPU lacks would stop the
    process)."""
    environ = os.environ if environ is None else environ
    environ.setdefault("MKL_CBWR", MKL_MODE)
    environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
    flags = host_cpu_flags() if cpu_flags is None else cpu_flags
    if "avx2" in flags:
        environ.setdefault("ATEN_CPU_CAPABILITY", ATEN_CAPABILITY)


def host_cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (Linux's /proc/cpuinfo) where it is x86-64; else none."""
    if platform.machine().lower() not in _X86:
        return frozenset()
    return frozenset(cpuinfo_field("flags").split())


def cpuinfo_field(name: str) -> str:
    """The first value of `name` in Linux's /proc/cpuinfo ("flags", "vendor_id"); "" where absent."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((line for line in f if line.startswith(name)), "")
    except OSError:
        return ""
    return line.partition(":")[2].strip()
