"""The figures reported for one simulated rollout step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specroll.sim.loop import SimTrace
from specroll.tail import tail_seconds


@dataclass(frozen=True)
class RolloutMetrics:
    makespan_seconds: float  # until the last request finishes
    tokens_per_second: float  # output tokens over the makespan
    tail_seconds: float  # time spent solely on the last 10% of requests (`specroll.tail`, Seer §6.2.2)
    idle_gpu_fraction: float  # GPU time with nothing running, over all GPUs x makespan
    num_events: int
    num_preemptions: int
    num_fon_copies: int

    @classmethod
    def from_trace(cls, trace: SimTrace) -> "RolloutMetrics":
        makespan = float(np.max(trace.finish_seconds))
        return cls(
            makespan_seconds=makespan,
            tokens_per_second=float(trace.generated.sum()) / makespan,
            tail_seconds=tail_seconds(trace.finish_seconds),
            idle_gpu_fraction=1.0 - trace.busy_gpu_seconds / (trace.total_gpus * makespan),
            num_events=trace.num_events,
            num_preemptions=trace.num_preemptions,
            num_fon_copies=trace.num_fon_copies,
        )
