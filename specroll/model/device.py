"""Where a model runs: `--device cpu|cuda|auto` resolved against what this torch can reach."""

from __future__ import annotations

import torch

DEVICES = ("cpu", "cuda", "auto")
DTYPES = ("float32", "bfloat16", "float16")


def resolve_device(name: str) -> str:
    """"auto" is cuda where torch sees a GPU, else cpu; "cuda" where it sees none is refused, with why."""
    if name not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {name!r}")
    is_available = torch.cuda.is_available()
    if name == "auto":
        return "cuda" if is_available else "cpu"
    if name == "cuda" and not is_available:
        reason = "this torch is a CPU build" if torch.version.cuda is None else "no CUDA device is visible"
        raise ValueError(f"--device cuda: CUDA is not available ({reason}: torch {torch.__version__})")
    return name


def check_dtype(name: str) -> str:
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return name


def check_numerics(device: torch.device, batch_invariant: bool) -> None:
    """Batch-invariant numerics rest on probes of the CPU's BLAS and on its in-order cumsum: off the
    CPU they are not proven, so they are refused there (`meta`, shapes only, is allowed)."""
    if batch_invariant and device.type not in ("cpu", "meta"):
        raise ValueError(f"batch-invariant numerics are built and proven for the CPU's kernels, not for "
                         f"{device.type}: pass --fast-numerics there")
