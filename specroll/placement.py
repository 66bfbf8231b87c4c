"""Where an engine runs and in what precision, checked without torch (the spec travels to workers)."""

from __future__ import annotations

RESOLVED_DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")


def check_placement(device: str, dtype: str, batch_invariant: bool) -> None:
    """A resolved device, a known dtype, and batch-invariant numerics only on the CPU (they rest on
    probes of the CPU's BLAS and its in-order cumsum: elsewhere they are not proven)."""
    if device not in RESOLVED_DEVICES:
        raise ValueError(
            f"device must be one of {', '.join(RESOLVED_DEVICES)} (resolve 'auto' first), got {device!r}"
        )
    check_dtype(dtype)
    check_numerics(device, batch_invariant)


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def check_numerics(device: str, batch_invariant: bool) -> None:
    """Batch-invariant numerics only on the CPU (`meta`, shapes only, passes too)."""
    if batch_invariant and device not in ("cpu", "meta"):
        raise ValueError(
            f"batch-invariant numerics are built and proven for the CPU's kernels, not for "
            f"{device}: pass --fast-numerics there"
        )


def is_batch_invariant(device: str, fast_numerics: bool) -> bool:
    """The numerics a run gets on `device`: batch-invariant on the CPU unless the fast ones are asked
    for; the fast ones elsewhere."""
    return device == "cpu" and not fast_numerics
