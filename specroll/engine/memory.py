"""How many requests can run at once in the memory at hand: the KV cache's size, and the batch that fits.

The cache holds every slot's keys and values for the longest sequence the rollout allows, whether or
not a request fills them: 2 x layers x KV heads x head_dim x positions per slot. At SmolLM2's shape
in fp32 that is 45 KiB a position, so 256 slots of 768 positions take 8.4 GiB. Where that is more
than half the memory available (the rest is for the weights, the logits and the drafter), the engine
runs fewer requests at once and says so; tokens do not change (exact mode's are batch-invariant).
No torch here, except to ask a GPU for its free memory.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from specroll.model.config import ModelConfig

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
KV_SHARE = 0.5  # of the available memory, at most, for the KV cache


def kv_bytes_per_slot(config: ModelConfig, positions: int, dtype: str) -> int:
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * positions * DTYPE_BYTES[dtype]


def fitting_batch_size(requested: int, bytes_per_slot: int, available_bytes: int | None) -> int:
    """The requested batch, or the most slots whose cache takes at most KV_SHARE of what is available
    (at least one); unchanged where the available memory is unknown."""
    if available_bytes is None:
        return requested
    return max(1, min(requested, int(KV_SHARE * available_bytes) // max(1, bytes_per_slot)))


def available_bytes(device: str) -> int | None:
    """Free memory of the device: MemAvailable on the CPU (Linux), the GPU's free memory on CUDA."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def batch_that_fits(requested: int, config: ModelConfig, positions: int, dtype: str, device: str) -> int:
    """`fitting_batch_size` on this machine, with one line on stderr where it had to run fewer."""
    per_slot = kv_bytes_per_slot(config, positions, dtype)
    available = available_bytes(device)
    fitted = fitting_batch_size(requested, per_slot, available)
    if fitted < requested:
        print(
            f"specroll: a KV cache of {requested} slots x {positions} positions needs "
            f"{size_text(requested * per_slot)}, more than half of the {size_text(available)} available: "
            f"running {fitted} requests at once (--max-batch-size sets it)",
            file=sys.stderr,
        )
    return fitted


_UNITS = {
    "": 1 << 30,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
}
_KV_MEMORY = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%|[a-z]*)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class KvMemory:
    """A KV-cache budget: a size ("8" and "8GiB" are 8 GiB, "512MiB") or a share of the memory free
    when the engine is built ("0.4" or "40%", as vLLM's --gpu-memory-utilization and SGLang's
    --mem-fraction-static). A bare number up to 1 is a share, above 1 a size in GiB."""

    num_bytes: int | None = None
    fraction: float | None = None

    @classmethod
    def parse(cls, text: str) -> KvMemory:
        match = _KV_MEMORY.match(text)
        unit = match.group(2).lower() if match else ""
        value = float(match.group(1)) if match else 0.0
        if match is None or value <= 0 or (unit != "%" and unit not in _UNITS):
            raise ValueError(
                f"--kv-memory: give GiB (8, 8GiB), MiB (512MiB) or a share (0.4, 40%), got {text!r}"
            )
        if unit == "%" or (not unit and value <= 1):
            share = value / 100 if unit == "%" else value
            if share > 1:
                raise ValueError(f"--kv-memory: a share must be at most 100%, got {text!r}")
            return cls(fraction=share)
        return cls(num_bytes=int(value * _UNITS[unit]))

    def budget(self, available: int | None) -> int:
        """The budget in bytes, given the free memory (None: unknown)."""
        if self.num_bytes is not None:
            return self.num_bytes
        if available is None:
            raise ValueError(
                "--kv-memory: a share of free memory, but this machine does not say how much is free"
            )
        return int(self.fraction * available)


def cache_shape(
    budget_bytes: int, bytes_per_position: int, max_batch_size: int, positions: int
) -> tuple[int, int]:
    """(slots, positions a slot) of a cache within `budget_bytes`: as many slots of `positions` as fit,
    up to `max_batch_size`; where not even one fits, one slot of the positions that do."""
    slots = min(max_batch_size, budget_bytes // (bytes_per_position * positions))
    if slots >= 1:
        return slots, positions
    return 1, budget_bytes // bytes_per_position


def size_text(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.1f} GiB" if num_bytes >= 2**30 else f"{num_bytes / 2**20:.0f} MiB"
