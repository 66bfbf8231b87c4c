"""`bench`'s named workloads: the flags of a workload worth comparing systems on, under one name. Torch-free.

A preset fills `bench`'s workload flags (model, task, prompts, samples, batch, length, temperature);
a flag given on the command line wins over its preset's value (`resolve_workload`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping


@dataclass(frozen=True)
class BenchPreset:
    """One workload. The field names are `bench`'s flags' (`--max-batch-size` sets max_batch_size)."""

    summary: str
    model: str
    task: str
    num_prompts: int
    n: int  # samples per prompt: the group size
    max_batch_size: int
    max_tokens: int
    temperature: float

    def __post_init__(self) -> None:
        counts = {
            "num_prompts": self.num_prompts,
            "n": self.n,
            "max_batch_size": self.max_batch_size,
            "max_tokens": self.max_tokens,
        }
        bad = {name: value for name, value in counts.items() if value < 1}
        if bad:
            raise ValueError(f"a preset's counts must be >= 1, got {bad}")
        if self.temperature < 0.0:
            raise ValueError(f"a preset's temperature must be >= 0, got {self.temperature}")

    def workload(self) -> dict[str, object]:
        """The flags it sets, by their argparse names."""
        return {name: value for name, value in asdict(self).items() if name != "summary"}


WORKLOAD_FLAGS = tuple(name for name in BenchPreset.__dataclass_fields__ if name != "summary")

PRESETS: dict[str, BenchPreset] = {
    "rl-shape": BenchPreset(
        "one GRPO step's rollout: 8 GSM8K prompts x 8 samples at batch 64, 256 new tokens, T=1",
        "smollm2",
        "gsm8k",
        num_prompts=8,
        n=8,
        max_batch_size=64,
        max_tokens=256,
        temperature=1.0,
    ),
    "long-tail": BenchPreset(
        "the rl-shape's prompts with room for long answers: 1,024 new tokens, so that the batch "
        "drains while the longest decode on (the stretch the papers' tail work targets)",
        "smollm2",
        "gsm8k",
        num_prompts=8,
        n=8,
        max_batch_size=64,
        max_tokens=1024,
        temperature=1.0,
    ),
}


def get_preset(name: str) -> BenchPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def resolve_workload(
    given: Mapping[str, object | None], preset: str | None, defaults: Mapping[str, object]
) -> dict[str, object]:
    """Each workload flag's value: as given (None: not given), else the preset's, else `defaults`'."""
    base = dict(defaults) if preset is None else get_preset(preset).workload()
    return {name: base[name] if given.get(name) is None else given[name] for name in WORKLOAD_FLAGS}
