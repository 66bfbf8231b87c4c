"""Compiling specroll's CPU kernels (`csrc/`) once per machine, and loading them.

The kernels are C++ with AVX-512 intrinsics, compiled by `torch.utils.cpp_extension` (ninja, the
machine's C++ compiler) into a cache folder (`$SPECROLL_HOME/cpu-kernels`, default
~/.cache/specroll): the first run compiles, with a line saying so and how long it took; later runs
load the cached library unless a source changed. Where the CPU lacks AVX-512, or no compiler or
ninja is at hand, `load` returns None with the reason, and the model runs torch's kernels.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType

from specroll.cpu_env import host_cpu_flags

NEEDED_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"})
# no fast-math, no contraction: every fused multiply-add is one the source writes
CFLAGS = ("-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma",
          "-ffp-contract=off", "-fno-fast-math", "-std=c++17")  # fmt: skip
_CSRC = Path(__file__).parent / "csrc"
SOURCES = tuple(sorted(path.name for path in _CSRC.glob("*.cpp")))  # every file of csrc/ is built
HEADERS = tuple(sorted(path.name for path in _CSRC.glob("*.h")))


def missing_requirement(cpu_flags: frozenset[str] | None = None) -> str | None:
    """Why the kernels cannot run here (the CPU's flags, a compiler, ninja), or None."""
    flags = host_cpu_flags() if cpu_flags is None else cpu_flags
    lacking = sorted(NEEDED_FLAGS - flags)
    if lacking:
        return f"the CPU lacks {', '.join(lacking)}"
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        return "no C++ compiler (c++) on PATH"
    try:
        import ninja  # noqa: F401
    except ImportError:
        return "ninja is not installed (pip install ninja)"
    return None


def cache_folder() -> Path:
    home = os.environ.get("SPECROLL_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "specroll")
    return Path(home) / "cpu-kernels" / _source_hash()


def _source_hash() -> str:
    digest = hashlib.sha256(" ".join(CFLAGS).encode())
    for name in (*SOURCES, *HEADERS):
        digest.update((_CSRC / name).read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def load() -> tuple[ModuleType | None, str]:
    """(the compiled module, "") or (None, why not): compiled on first use, cached after."""
    reason = missing_requirement()
    if reason is not None:
        return None, reason
    folder = cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    is_cached = any(folder.glob("*.so"))
    if not is_cached:
        print("specroll: compiling its CPU kernels, once for this machine...", file=sys.stderr)
    started = time.monotonic()
    try:
        from torch.utils import cpp_extension

        module = cpp_extension.load(
            name="specroll_cpu_kernels",
            sources=[str(_CSRC / name) for name in SOURCES],
            extra_cflags=list(CFLAGS),
            build_directory=str(folder),
            verbose=False,
        )
    except Exception as error:  # a compiler error, a missing header: the model runs torch's kernels
        return None, f"compiling them failed ({type(error).__name__}: {str(error).splitlines()[0][:200]})"
    if not is_cached:
        print(f"specroll: CPU kernels compiled in {time.monotonic() - started:.0f} s, cached in {folder}",
              file=sys.stderr)  # fmt: skip
    return module, ""
