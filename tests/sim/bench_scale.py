import time
from specroll.sim.presets import get_preset
from specroll.sim.systems import SYSTEMS, simulate
from specroll.sim.workload import LengthDistribution
p = get_preset("DAPO-32B-20K").with_overrides(num_gpus=2048, num_prompts=1024, group_size=16,
        lengths=LengthDistribution(20000, 0.0, 0.0, 20480))
for name in ("verl", "specactor", "seer"):
    t = time.perf_counter()
    m, _ = simulate(p, SYSTEMS[name])
    print(f"{name}: {p.num_workers} workers x {p.num_requests} requests x ~20K tokens: {time.perf_counter()-t:.1f} s wall (perf_counter); makespan {m.makespan_s:.0f} s, events {m.num_events}", flush=True)
