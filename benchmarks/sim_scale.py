"""How long the simulator takes at cluster scale: 2,048 GPUs, 16,384 requests of ~20K tokens.

Run: `PYTHONPATH=. python benchmarks/sim_scale.py` (each system timed with `time.perf_counter`).
"""

from __future__ import annotations

import time

from specroll.sim.presets import get_preset
from specroll.sim.systems import SYSTEMS, simulate
from specroll.sim.workload import LengthDistribution


def main() -> None:
    preset = get_preset("DAPO-32B-20K").with_overrides(
        num_gpus=2048, num_prompts=1024, group_size=16, lengths=LengthDistribution(20000, 0.0, 0.0, 20480)
    )
    for name in ("verl", "specactor", "seer"):
        started = time.perf_counter()
        metrics, _ = simulate(preset, SYSTEMS[name])
        print(
            f"{name}: {preset.num_workers} workers x {preset.num_requests} requests x ~20K tokens: "
            f"{time.perf_counter() - started:.1f} s wall; makespan {metrics.makespan_seconds:.0f} s, "
            f"events {metrics.num_events}",
            flush=True,
        )


if __name__ == "__main__":
    main()
