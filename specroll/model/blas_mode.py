"""The CPU BLAS's reproducible mode: a GEMM's bits must not depend on how many threads it gets or on
where its buffers lie, or exact mode's tokens would depend on what else the machine runs.

torch's CPU BLAS on x86 is Intel MKL. With its conditional numerical reproducibility (CNR) off, MKL's
default, a GEMM may take other code paths for other buffer alignments, and a threaded GEMM's bits
depend on how its work is split between threads; MKL documents that its results may then differ from
run to run. Measured on an AMD EPYC (AVX2 branch) with 2 threads: a 1-3-row `F.linear` changed bits
when its weight or input lay 4 or 8 bytes off a 64-byte boundary, and 5-11-row calls changed bits
between 1 and 2 threads. MKL's *strict* CNR mode makes ?gemm bitwise reproducible whatever the thread
count (on its AVX2 and AVX-512 branches, as MKL documents): under `AUTO,STRICT` neither effect is left
here, and a SmolLM2-shaped forward gives the same logits on 1 thread as on 2.

MKL reads the mode once, at its first call, from the environment: importing specroll sets
`MKL_CBWR=AUTO,STRICT` unless it is already set (`specroll/__init__.py`). A process that ran MKL
before importing specroll, or that set another mode, keeps its own: `irreproducibility` then says
why, and exact mode's automatic thread choice stays at one thread (`engine.factory.apply_threads`).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

MODE = "AUTO,STRICT"  # the native code branch, strict: bitwise reproducible at any thread count
_STRICT = 0x10000  # MKL_CBWR_STRICT
_ALL = -1  # MKL_CBWR_ALL: the whole setting, branch and flags


def irreproducibility() -> str | None:
    """None where this process's CPU GEMMs are bitwise reproducible at any thread count and alignment
    (MKL in strict CNR mode); else why they may not be."""
    if not torch.backends.mkl.is_available():
        return "torch's CPU BLAS here is not MKL, whose strict reproducible mode this relies on"
    mode = _mkl_mode()
    if mode is None:
        return "MKL's reproducibility setting cannot be read in this build of torch"
    if not mode & _STRICT:
        return (
            f"MKL runs without its strict reproducible mode (set MKL_CBWR={MODE} before the process's "
            "first matrix product; importing specroll first does it)"
        )
    return None


def _mkl_mode() -> int | None:
    """MKL's CNR setting (mkl_cbwr_get(MKL_CBWR_ALL)), read where torch links MKL; None if unreadable.
    Reading it makes MKL settle its mode, as its first call would."""
    library = _torch_cpu_library()
    getter = getattr(library, "mkl_serv_cbwr_get", None) if library is not None else None
    if getter is None:
        return None
    getter.restype, getter.argtypes = ctypes.c_int, [ctypes.c_int]
    return getter(_ALL) & 0xFFFFFFFF


@functools.cache
def _torch_cpu_library() -> ctypes.CDLL | None:
    path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        return ctypes.CDLL(str(path))
    except OSError:
        return None
