"""What a step asks of the device, counted from torch's own dispatch on any device: the reads back to
the host (each a synchronisation on a GPU), the ops launched (each a kernel launch there, eagerly) and
the tensors allocated. A small model's step on a GPU costs launches and waits more than arithmetic
(docs/gpu.md), and these counts are the same on the CPU, so tests here hold them as ceilings.

- host reads: `.cpu()`, `.to("cpu")` (the host named as a string: a `torch.device` is the compute
  device's), `.numpy()`, `.tolist()`, `.item()`, a tensor's truth value or number, and ops whose output
  size depends on values (`nonzero`, `masked_select`, `unique`), each made on a tensor of the device's.
  A tensor is the host's when it was read back, made on the host (`torch.tensor` with no device named)
  or computed from the host's tensors alone, in this count or an earlier one (a step launched in one
  count is read in the next).
- ops: aten ops dispatched that compute (views and bare allocations left out).
- allocations: tensors an op returns in fresh storage (not a view, not written in place).

Ops and allocations are told apart by where they run: inside a recorded region (`Replayer.run`: on a
GPU one graph replay, its memory the graph's pool) or launched from Python around it.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from specroll.model.cuda_graphs import Replayer

READS = {"cpu", "numpy", "tolist", "item", "__bool__", "__int__", "__float__", "__index__"}
VALUE_SHAPED = {"nonzero", "masked_select", "unique", "argwhere", "nonzero_static"}  # sync for their size
HOST_COPIES = {"cpu", "numpy"}  # what a read returns is the host's
NOT_LAUNCHED = {"empty", "empty_strided", "detach", "alias", "lift_fresh", "_local_scalar_dense"}
_HOST_TENSORS: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()


@dataclass
class StepCounts:
    """Counts over the calls made inside `count_device_work`."""

    num_host_reads: int = 0  # device-to-host reads: one synchronisation each on a GPU
    num_ops_launched: int = 0  # from Python: on a GPU each a kernel launch
    num_ops_recorded: int = 0  # inside recorded regions: one graph replay on a GPU
    num_allocations: int = 0  # from Python: on a GPU each an allocator call
    num_allocations_recorded: int = 0  # inside recorded regions: the graph's pool on a GPU
    ops: Counter[str] = field(default_factory=Counter)  # op name -> count, wherever it ran
    reads: Counter[str] = field(default_factory=Counter)  # what read back to the host -> count

    def per(self, num_steps: int) -> dict[str, float]:
        """Every count divided by `num_steps`, by name."""
        names = ("num_host_reads", "num_ops_launched", "num_ops_recorded", "num_allocations")
        names += ("num_allocations_recorded",)
        return {name: getattr(self, name) / num_steps for name in names}


class _HostReads(TorchFunctionMode):
    """Counts reads of the device's tensors back to the host and tracks which tensors are the host's."""

    def __init__(self, counts: StepCounts) -> None:
        super().__init__()
        self.counts = counts
        self.host = _HOST_TENSORS  # id -> the host's tensor (a WeakSet compares by ==), across counts

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        is_host = bool(tensors) and all(self._is_host(t) for t in tensors)
        is_copy_to_host = name in HOST_COPIES or (name == "to" and _names_cpu(args, kwargs))
        if (is_copy_to_host or name in READS or name in VALUE_SHAPED) and not is_host:
            self.counts.num_host_reads += 1
            self.counts.reads[name] += 1
        out = func(*args, **kwargs)
        if is_host or is_copy_to_host or _is_host_made(name, kwargs):
            self._mark(out)
        return out

    def _is_host(self, tensor: torch.Tensor) -> bool:
        return self.host.get(id(tensor)) is tensor

    def _mark(self, out) -> None:
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor):
                self.host[id(value)] = value


def _names_cpu(args, kwargs) -> bool:
    """`.to("cpu")`: the host named as such (a `torch.device` is the compute device, the CPU on a CPU
    run, where a copy to it is no read)."""
    return any(a == "cpu" for a in (*args[1:], kwargs.get("device")) if isinstance(a, str))


def _is_host_made(name: str, kwargs: dict) -> bool:
    return name in {"tensor", "as_tensor"} and kwargs.get("device") is None


class _Dispatches(TorchDispatchMode):
    """Counts the aten ops that compute and the tensors they return in fresh storage."""

    def __init__(self, counts: StepCounts) -> None:
        super().__init__()
        self.counts = counts
        self.is_recorded = False  # inside a recorded region

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or name in NOT_LAUNCHED:
            return out
        self.counts.ops[name] += 1
        fresh = _num_fresh(out, args, kwargs or {})
        if self.is_recorded:
            self.counts.num_ops_recorded += 1
            self.counts.num_allocations_recorded += fresh
        else:
            self.counts.num_ops_launched += 1
            self.counts.num_allocations += fresh
        return out


def _storages(values) -> set[int]:
    return {v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor) and v.numel()}


def _num_fresh(out, args, kwargs) -> int:
    """Tensors in `out` whose storage none of the inputs holds."""
    outputs = out if isinstance(out, (tuple, list)) else (out,)
    inputs = _storages([*_flat(args), *_flat(kwargs.values())])
    return sum(1 for o in outputs if isinstance(o, torch.Tensor) and o.numel() and _storages([o]) - inputs)


def _flat(values) -> list:
    flat = []
    for value in values:
        flat += _flat(value) if isinstance(value, (tuple, list)) else [value]
    return flat


@contextmanager
def count_device_work(replayer: Replayer | None = None) -> Iterator[StepCounts]:
    """Count what the calls inside ask of the device; `replayer`'s runs are the recorded regions."""
    counts = StepCounts()
    dispatches = _Dispatches(counts)
    with _HostReads(counts), dispatches, _recorded_regions(replayer, dispatches):
        yield counts


@contextmanager
def _recorded_regions(replayer: Replayer | None, dispatches: _Dispatches) -> Iterator[None]:
    if replayer is None:
        yield
        return
    run = replayer.run

    def recorded_run(key, fn):
        dispatches.is_recorded = True
        try:
            return run(key, fn)
        finally:
            dispatches.is_recorded = False

    replayer.run = recorded_run
    try:
        yield
    finally:
        del replayer.run  # the class's method again
