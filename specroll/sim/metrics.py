"""The figures reported for one simulated rollout step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specroll.sim.loop import SimTrace


@dataclass(frozen=True)
class RolloutMetrics:
    makespan_seconds: float  # until the last request finishes
    throughput_tps: float  # output tokens per second over the step
    tail_seconds: float  # time spent solely on the last 10% of requests (Seer §6.2.2)
    idle_gpu_fraction: float  # GPU time with nothing running, over all GPUs x makespan
    num_events: int
    num_preemptions: int
    num_fon_copies: int

    @classmethod
    def from_trace(cls, trace: SimTrace) -> "RolloutMetrics":
        finish = np.sort(trace.finish_seconds)
        makespan = float(finish[-1])
        ninetieth = float(finish[int(np.ceil(0.9 * len(finish))) - 1])
        return cls(
            makespan_seconds=makespan,
            throughput_tps=float(trace.generated.sum()) / makespan,
            tail_seconds=makespan - ninetieth,
            idle_gpu_fraction=1.0 - trace.busy_gpu_seconds / (trace.total_gpus * makespan),
            num_events=trace.num_events,
            num_preemptions=trace.num_preemptions,
            num_fon_copies=trace.num_fon_copies,
        )
