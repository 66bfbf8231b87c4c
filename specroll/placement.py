"""Where an engine runs and in what precision, checked without torch (the spec travels to workers)."""

from __future__ import annotations

import importlib.util
import os

RESOLVED_DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")


def check_placement(device: str, dtype: str, batch_invariant: bool) -> None:
    """A resolved device, a known dtype, and batch-invariant numerics where they can run
    (`check_numerics`)."""
    if device not in RESOLVED_DEVICES:
        raise ValueError(
            f"device must be one of {', '.join(RESOLVED_DEVICES)} (resolve 'auto' first), got {device!r}"
        )
    check_dtype(dtype)
    check_numerics(device, batch_invariant)


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def invariant_kernels(device: str, dtype: str = "float32") -> str:
    """The kernels batch-invariant numerics run on `device` for a model in `dtype`: on the CPU,
    "cpu" for bf16 where specroll's own kernels can run (`cpu_kernels.build.missing_requirement`:
    AVX-512, a compiler, ninja; `SPECROLL_CPU_KERNELS=off` declines them), else "probed" (its BLAS
    at call sizes probed per layer, `model.batch_invariant`; `meta`, shapes only, too); "triton" on
    a GPU (fixed-order kernels, `specroll.kernels`)."""
    if device == "cpu" and dtype == "bfloat16" and cpu_kernels_wanted():
        from specroll.cpu_kernels.build import missing_requirement

        if missing_requirement() is None:
            return "cpu"
    if device in ("cpu", "meta"):
        return "probed"
    if device == "cuda":
        return "triton"
    raise ValueError(f"batch-invariant numerics have no kernels for {device}: pass --fast-numerics there")


def cpu_kernels_wanted() -> bool:
    """Whether specroll's CPU kernels may serve bf16 (`SPECROLL_CPU_KERNELS=off` runs the probed BLAS,
    the side-by-side comparison of the two)."""
    return os.environ.get("SPECROLL_CPU_KERNELS", "on").lower() not in ("off", "0", "no")


def cpu_kernels_ready() -> bool:
    """Whether specroll's CPU kernels are wanted and built here (`cpu_kernels.build.load`: compiled on
    the first ask, cached after): for the parts outside the model that use them where they can
    (the inverse-CDF draw, a bf16 draft head's linear layers), and run torch's otherwise."""
    if not cpu_kernels_wanted():
        return False
    from specroll.cpu_kernels.build import load

    return load()[0] is not None


def check_numerics(device: str, batch_invariant: bool) -> None:
    """Batch-invariant numerics where their kernels run: the CPU, and a GPU with Triton installed."""
    needs_triton = batch_invariant and invariant_kernels(device) == "triton"
    if needs_triton and importlib.util.find_spec("triton") is None:
        raise ValueError(
            "batch-invariant numerics on a GPU run as Triton kernels, and Triton is not installed: "
            "pip install 'specroll[gpu]' (or pass --fast-numerics)"
        )


def is_batch_invariant(device: str, fast_numerics: bool) -> bool:
    """The numerics a run gets: batch-invariant (exact mode's identity at any batch size) on every
    device unless the fast ones are asked for."""
    del device  # the CPU and a GPU both have them (`invariant_kernels`)
    return not fast_numerics


def cache_dtype(device: str, dtype: str, batch_invariant: bool) -> str:
    """The KV cache's dtype for a model in `dtype`: float32 where the CPU's probed batch-invariant
    attention (`batch_invariant` True: the "probed" kernels; specroll's CPU kernels read bf16 keys)
    computes in fp32 (`model.batch_invariant.block_attention`), so that a 16-bit model's keys and
    values are widened once, when written, rather than at every read of every forward (measured
    at batch 64 with 384 positions, bf16 exact plain decoding ran at half the fast numerics' speed
    with a bf16 cache); else the model's dtype. Widening bf16 is exact: the bits are the same."""
    if device == "cpu" and batch_invariant and dtype in ("bfloat16", "float16"):
        return "float32"
    return dtype
