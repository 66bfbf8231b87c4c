"""The simulator's prediction for a measured rollout, to set next to the measurement.

The same requests (their measured output lengths, groups and prompt lengths: in exact mode every
dispatch gives the same tokens, so one measured run fixes them for all), the same dispatchers
(`specroll.scheduling.dispatch`), and the worker's cost from a `specroll profile` fit. Plain decoding:
the prediction is about where requests run, not about drafting.

Each simulated worker follows the engine's own rules (`sim.worker.EngineRules`): it admits queued
requests as the engine's scheduler does, prefills those admitted together in shared forwards, and
reads each attention chunk's rows to the chunk's longest, as the engine's runner does. A
worker on Ray also idles after every iteration in which a request finished, while its report goes
back to the coordinator and the next call comes (`REPORT_IDLE_SECONDS`), and engines that compute at once
on one CPU slow each other down (`CONTENTION`, `LoopConfig.contention`). Both are measured apart
from any rollout. What the model does not know is the level of a forward on the machine at the time:
a profile times one process alone, once, where a bench runs beside whatever else the machine runs.
`bench` measures that level on the one-engine run of the same round (its measured makespan over its
replay, `predict_engine_makespan`) and `scaled` the profile by it; the dispatches' differences are
the model's.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

import numpy as np

from specroll.policies.cost_model import CostModel
from specroll.scheduling.dispatch import Dispatcher, dense_ids, make_dispatcher
from specroll.sim.acceptance_rates import AcceptanceModel, DrafterProfile
from specroll.sim.loop import LoopConfig, RolloutLoop
from specroll.sim.profiled_cost import ProfiledCost
from specroll.sim.speculation import PlainDecoding, SpecCosts
from specroll.sim.worker import EngineRules, Worker
from specroll.sim.workload import Workload

# An engine's idle time per report on Ray: from its call's return to the next call's start, median over
# the calls of `bench --workers 2`'s static system at B = 32 (2026-11-24, 2-core x86-64, instrumented, at
# a 1-minute load of 4: 3.7 ms, a quarter of the calls under 2.5 ms; not fitted to any makespan): Ray's
# round trip and the coordinator's bookkeeping.
REPORT_IDLE_SECONDS = 3.5e-3
# A forward of one engine while another computes beside it, over one alone, less one: `python
# benchmarks/forward_contention.py` (batch 32, context 200: 6.58 ms alone, 7.16 ms two at once; 2026-11-24,
# 2-core x86-64 at a 1-minute load of 1.4).
CONTENTION = 0.088


@dataclass(frozen=True)
class MeasuredRollout:
    lengths: np.ndarray  # (n,) output tokens of each request
    group_ids: np.ndarray  # (n,) 0..G-1
    prompt_tokens: np.ndarray  # (n,)
    max_tokens: int

    @classmethod
    def from_records(
        cls, records: Sequence, prompt_tokens: Sequence[int], max_tokens: int
    ) -> "MeasuredRollout":
        """From rollout records (`RolloutRecord`: `prompt_id`, `token_ids`) and each one's prompt length."""
        groups = dense_ids([r.prompt_id for r in records])
        lengths = np.array([max(1, len(r.token_ids)) for r in records], dtype=np.int64)
        return cls(lengths, groups, np.asarray(prompt_tokens, dtype=np.int64), max_tokens)

    @property
    def num_requests(self) -> int:
        return len(self.lengths)

    def unknown_lengths(self) -> np.ndarray:
        """What a real dispatcher knows of each request's length: it may run to max_tokens."""
        return np.full(self.num_requests, float(self.max_tokens))


def predict_makespan(
    rollout: MeasuredRollout,
    dispatch: str,
    num_workers: int,
    max_num_seqs: int,
    chunk_size: int,
    cost_model: CostModel,
    seed: int = 0,
    report_seconds: float = REPORT_IDLE_SECONDS,
    contention: float = CONTENTION,
) -> float:
    """Seconds from the first dispatch to the last request's end over `num_workers` engines on Ray
    (`rollout --workers`), simulated. The KV capacity is the coordinator's."""
    capacity = float(max_num_seqs * (int(rollout.prompt_tokens.max()) + rollout.max_tokens))
    workers = [
        Worker(
            i,
            1,
            capacity,
            max_num_seqs,
            rollout.prompt_tokens,
            rollout.lengths,
            EngineRules(max_num_seqs),
            report_seconds,
        )
        for i in range(num_workers)
    ]
    dispatcher = make_dispatcher(
        dispatch,
        rollout.unknown_lengths(),
        rollout.group_ids,
        rollout.prompt_tokens,
        num_workers,
        chunk_size,
        rollout.max_tokens,
        seed,
    )
    cost = ProfiledCost(cost_model, capacity)
    return _simulate(rollout, workers, dispatcher, cost, LoopConfig(contention=contention))


def predict_engine_makespan(rollout: MeasuredRollout, max_num_seqs: int, cost_model: CostModel) -> float:
    """The same requests on one engine in the calling process (`rollout` on one engine, `bench`'s
    plain): every request queued at once, in order, admitted by the engine's rules; no reports."""
    n = rollout.num_requests
    capacity = float(n * (int(rollout.prompt_tokens.max()) + rollout.max_tokens))  # every whole context
    worker = Worker(0, 1, capacity, n, rollout.prompt_tokens, rollout.lengths, EngineRules(max_num_seqs))
    dispatcher = make_dispatcher(
        "static",
        rollout.unknown_lengths(),
        rollout.group_ids,
        rollout.prompt_tokens,
        1,
        rollout.max_tokens,
        rollout.max_tokens,
    )
    return _simulate(rollout, [worker], dispatcher, ProfiledCost(cost_model, capacity), LoopConfig())


def scaled(cost_model: CostModel, factor: float) -> CostModel:
    """Every forward `factor` times as long: each coefficient (every float field but the fit error)."""
    names = [f.name for f in fields(cost_model) if f.type in ("float", float) and f.name != "fit_error"]
    return replace(cost_model, **{name: getattr(cost_model, name) * factor for name in names})


def _simulate(
    rollout: MeasuredRollout,
    workers: list[Worker],
    dispatcher: Dispatcher,
    cost: ProfiledCost,
    config: LoopConfig,
) -> float:
    n = rollout.num_requests
    mean_prompt = int(round(float(rollout.prompt_tokens.mean())))
    workload = Workload(rollout.lengths, rollout.group_ids, mean_prompt, rollout.max_tokens)
    acceptance = AcceptanceModel((DrafterProfile("none", 0.5, 1.0),))  # never read: plain decoding
    loop = RolloutLoop(
        workload,
        acceptance,
        np.zeros((1, n)),
        workers,
        dispatcher,
        PlainDecoding(SpecCosts(cost, (None,), (0.0,))),
        cost,
        len(workers),
        config,
    )
    return float(np.max(loop.run().finish_seconds))
