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
`MKL_CBWR=AVX2,STRICT` unless it is already set (`specroll.cpu_env`: the AVX2 branch, because
MKL's AVX-512 branch at two threads was not reproducible on an AVX-512 Xeon). A process that ran MKL
before importing specroll, or that set another mode, keeps its own: `irreproducibility` then says
why, and exact mode's automatic thread choice stays at one thread (`engine.threads`).
`describe` says which branch and kernels ran, for run summaries and the golden records' family.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from specroll.cpu_env import MKL_MODE, cpuinfo_field

_STRICT = 0x10000  # MKL_CBWR_STRICT
_ALL = -1  # MKL_CBWR_ALL: the whole setting, branch and flags
_AUTO = 2  # MKL_CBWR_AUTO
BRANCHES = {
    1: "OFF",
    2: "AUTO",
    3: "COMPATIBLE",
    4: "SSE2",
    6: "SSSE3",
    7: "SSE4_1",
    8: "SSE4_2",
    9: "AVX",
    10: "AVX2",
    11: "AVX512_MIC",
    12: "AVX512",
    13: "AVX512_MIC_E1",
    14: "AVX512_E1",
}  # mkl.h


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
            f"MKL runs without its strict reproducible mode (set MKL_CBWR={MKL_MODE} before the process's "
            "first matrix product; importing specroll first does it)"
        )
    return None


@dataclass(frozen=True)
class CpuNumerics:
    """What decides a CPU row's bits in this process besides the model and the thread count: MKL's
    version, the code branch its GEMMs run and whether strictly, and ATen's kernels' instruction set.
    Two processes with the same `family` run the same kernels; records are compared across machines
    only within one family."""

    mkl_version: str | None  # e.g. "2024.2"; None without MKL
    mkl_branch: str | None  # the branch that runs: "AVX2", or "AUTO" where MKL does not name it
    mkl_strict: bool
    aten_capability: str  # ATen's kernels: "AVX2", "AVX512", "DEFAULT", ...
    cpu: str  # the CPU's vendor and architecture, e.g. "AuthenticAMD x86_64"

    @property
    def family(self) -> str:
        if self.mkl_version is None:
            return f"no MKL; ATen {self.aten_capability}; {self.cpu}"
        strict = ",STRICT" if self.mkl_strict else ""
        branch = f"MKL {self.mkl_version} {self.mkl_branch}{strict}; ATen {self.aten_capability}"
        return branch if self.mkl_branch != "AUTO" else f"{branch}; {self.cpu}"  # AUTO is the CPU's own

    def describe(self) -> str:
        """One line for a run's summary."""
        if self.mkl_version is None:
            return f"ATen {self.aten_capability} kernels; no MKL (bits not pinned to a branch)"
        asked = _asked_branch()
        note = (
            f" ({asked} asked; MKL names branches on Intel CPUs only)"
            if asked not in (None, self.mkl_branch)
            else ""
        )
        strict = "strict" if self.mkl_strict else "not strict"
        mkl = f"MKL {self.mkl_version} {self.mkl_branch} branch, {strict}{note}"
        return f"{mkl}; ATen {self.aten_capability} kernels"


def describe() -> CpuNumerics:
    """The CPU numerics in force in this process (reading them settles MKL's mode, as a first call would)."""
    mode = _mkl_mode()
    aten = torch.backends.cpu.get_cpu_capability()
    cpu = f"{_cpu_vendor()} {platform.machine()}"
    if mode is None:
        return CpuNumerics(None, None, False, aten, cpu)
    return CpuNumerics(_mkl_version(), _branch_name(mode & 0xFFFF), bool(mode & _STRICT), aten, cpu)


def _branch_name(branch: int) -> str:
    if branch == _AUTO:  # MKL resolves AUTO to a named branch on Intel CPUs; elsewhere it stays AUTO
        branch = _call("mkl_serv_cbwr_get_auto_branch") or _AUTO
    return BRANCHES.get(branch, str(branch))


def _asked_branch() -> str | None:
    setting = os.environ.get("MKL_CBWR")
    return None if not setting else setting.split(",")[0].removeprefix("BRANCH=").strip().upper()


def _mkl_version() -> str | None:
    library = _torch_cpu_library()
    getter = getattr(library, "mkl_serv_get_version_string", None) if library is not None else None
    if getter is None:
        return None
    buffer = ctypes.create_string_buffer(256)
    getter(buffer, len(buffer))
    words = buffer.value.decode(errors="replace").split()
    return next((w.split("-")[0] for w in words if w[:1].isdigit()), "unknown")


def _cpu_vendor() -> str:
    return cpuinfo_field("vendor_id") or platform.processor() or "unknown"


def _call(name: str) -> int | None:
    library = _torch_cpu_library()
    function = getattr(library, name, None) if library is not None else None
    if function is None:
        return None
    function.restype, function.argtypes = ctypes.c_int, []
    return function()


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
