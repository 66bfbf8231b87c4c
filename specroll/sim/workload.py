"""Per-request output lengths of one rollout step: long-tailed, correlated within a group.

A group's typical length is log-normal across prompts; its requests scatter log-normally around it
(Seer §3.2 / Fig. 4: siblings have similar lengths). Lengths are clipped to [min_tokens, max_tokens],
so a mass of requests ends at the response budget as in the papers' traces. A recorded trace (one
list of lengths per group) can replace the distribution, and the distribution can be fitted to one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class LengthDistribution:
    median_tokens: float  # median of the group-typical length
    group_sigma: float  # log-normal sigma across groups
    within_group_sigma: float  # log-normal sigma of siblings around their group
    max_tokens: int  # the response budget
    min_tokens: int = 16

    def __post_init__(self) -> None:
        if not 0 < self.min_tokens <= self.median_tokens:
            raise ValueError("need 0 < min_tokens <= median_tokens")
        if self.group_sigma < 0 or self.within_group_sigma < 0:
            raise ValueError("sigmas must be non-negative")

    def sample(self, num_groups: int, group_size: int, rng: np.random.Generator) -> np.ndarray:
        """(num_groups, group_size) integer output lengths."""
        group_log = np.log(self.median_tokens) + self.group_sigma * rng.standard_normal((num_groups, 1))
        request_log = group_log + self.within_group_sigma * rng.standard_normal((num_groups, group_size))
        return np.clip(np.exp(request_log), self.min_tokens, self.max_tokens).astype(np.int64)

    @classmethod
    def fit(cls, lengths: np.ndarray, max_tokens: int) -> "LengthDistribution":
        """Moment fit on log lengths of a (num_groups, group_size) array (clipping ignored)."""
        logs = np.log(np.maximum(np.asarray(lengths, dtype=np.float64), 1.0))
        group_means = logs.mean(axis=1)
        within = float(np.sqrt(np.mean(logs.var(axis=1, ddof=1)))) if logs.shape[1] > 1 else 0.0
        return cls(
            median_tokens=float(np.exp(np.median(group_means))),
            group_sigma=float(group_means.std(ddof=1)) if len(group_means) > 1 else 0.0,
            within_group_sigma=within,
            max_tokens=max_tokens,
            min_tokens=int(max(1, np.min(lengths))),
        )


@dataclass(frozen=True)
class Workload:
    output_lengths: np.ndarray  # (num_requests,) tokens each request will generate
    group_ids: np.ndarray  # (num_requests,) prompt index; siblings are contiguous
    prompt_tokens: int
    max_tokens: int

    def __post_init__(self) -> None:
        if self.output_lengths.shape != self.group_ids.shape:
            raise ValueError("one group id per request")
        if len(self.output_lengths) == 0 or int(self.output_lengths.min()) < 1:
            raise ValueError("every request must generate at least one token")
        if int(self.output_lengths.max()) > self.max_tokens:
            raise ValueError("a request is longer than max_tokens")

    @property
    def num_requests(self) -> int:
        return len(self.output_lengths)

    @property
    def num_groups(self) -> int:
        return int(self.group_ids.max()) + 1

    @classmethod
    def from_groups(cls, lengths: np.ndarray, prompt_tokens: int, max_tokens: int) -> "Workload":
        lengths = np.asarray(lengths, dtype=np.int64)
        groups = np.repeat(np.arange(lengths.shape[0]), lengths.shape[1])
        return cls(lengths.reshape(-1), groups, prompt_tokens, max_tokens)

    @classmethod
    def sample(
        cls,
        dist: LengthDistribution,
        num_groups: int,
        group_size: int,
        prompt_tokens: int,
        rng: np.random.Generator,
    ) -> "Workload":
        return cls.from_groups(dist.sample(num_groups, group_size, rng), prompt_tokens, dist.max_tokens)

    @classmethod
    def from_trace(cls, path: str | Path) -> "Workload":
        """JSON {"prompt_tokens": int, "max_tokens": int, "groups": [[len, ...], ...]}."""
        data = json.loads(Path(path).read_text())
        groups = data["groups"]
        lengths = np.concatenate([np.asarray(g, dtype=np.int64) for g in groups])
        ids = np.concatenate([np.full(len(g), i) for i, g in enumerate(groups)])
        return cls(lengths, ids, int(data["prompt_tokens"]), int(data["max_tokens"]))
