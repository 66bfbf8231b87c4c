"""Every launch of specroll's Triton kernels goes through `launch`, which `count_launches` counts by
kernel name: how many kernels a forward asks of a GPU, where a small model's decode pays a few
microseconds a launch whatever the kernel's work (docs/gpu.md).

While a count is open, a launch runs with torch's dispatch modes set aside: in Triton's interpreter
a launch copies its arguments to numpy and back through torch ops, which a counter of torch's ops
(`engine.step_counters`) would otherwise take for the model's own. On a GPU a launch makes no torch
op, and with no count open `launch` is the bare `kernel[grid](...)`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from torch.utils._python_dispatch import _disable_current_modes

_open_counts: list[Counter[str]] = []  # the counts `count_launches` holds open, innermost last


@contextmanager
def count_launches() -> Iterator[Counter[str]]:
    """A Counter of the Triton kernels launched inside the block: kernel name -> launches."""
    counts: Counter[str] = Counter()
    _open_counts.append(counts)
    try:
        yield counts
    finally:
        _open_counts.remove(counts)


def launch(kernel, grid: tuple[int, ...], *args, **kwargs) -> None:
    """`kernel[grid](*args, **kwargs)`, counted by every open `count_launches`."""
    if not _open_counts:
        kernel[grid](*args, **kwargs)
        return
    for counts in _open_counts:
        counts[_name(kernel)] += 1
    with _disable_current_modes():
        kernel[grid](*args, **kwargs)


def _name(kernel) -> str:
    """The jitted function's name, bare: `_linear_kernel` -> `linear`."""
    return kernel.fn.__name__.removeprefix("_").removesuffix("_kernel")
