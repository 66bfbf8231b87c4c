"""The simulator's prediction for a measured multi-worker rollout, to set next to the measurement.

The same requests (their measured output lengths, groups and prompt lengths: in exact mode every
dispatch gives the same tokens, so one measured run fixes them for all), the same dispatchers
(`specroll.scheduling.dispatch`), and the worker's cost from a `specroll profile` fit. Plain decoding:
the prediction is about where requests run, not about drafting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specroll.policies.cost_model import CostModel
from specroll.scheduling.dispatch import dense_ids, make_dispatcher
from specroll.sim.acceptance import AcceptanceModel, DrafterProfile
from specroll.sim.loop import LoopConfig, RolloutLoop
from specroll.sim.profiled_cost import ProfiledCost
from specroll.sim.speculation import PlainDecoding, SpecCosts
from specroll.sim.worker import Worker
from specroll.sim.workload import Workload


@dataclass(frozen=True)
class MeasuredRollout:
    lengths: np.ndarray  # (n,) output tokens of each request
    group_ids: np.ndarray  # (n,) 0..G-1
    prompt_tokens: np.ndarray  # (n,)
    max_tokens: int

    @classmethod
    def from_records(cls, records: Sequence, prompt_tokens: Sequence[int], max_tokens: int) -> "MeasuredRollout":
        """From rollout records (`RolloutRecord`: `prompt_id`, `token_ids`) and each one's prompt length."""
        groups = dense_ids([r.prompt_id for r in records])
        lengths = np.array([max(1, len(r.token_ids)) for r in records], dtype=np.int64)
        return cls(lengths, groups, np.asarray(prompt_tokens, dtype=np.int64), max_tokens)


class _LengthBoundWorker(Worker):
    """A simulated worker that ends each request at its measured length. The dispatcher does not
    know lengths, as on real workers (it places chunks that may run to max_tokens); the worker does,
    so that a request finishes where it finished."""

    def __init__(self, lengths: np.ndarray, *args) -> None:
        super().__init__(*args)
        self._lengths = lengths

    def add(self, request_id: int, drafter: int, position: float, stop: float, prefill_seconds: float) -> None:
        super().add(request_id, drafter, position, min(stop, float(self._lengths[request_id])), prefill_seconds)


@dataclass(frozen=True)
class BatchedPrefillCost(ProfiledCost):
    """A profile whose prefills share forwards: an engine prefills the requests it admits together
    (up to 4 forwards, `prefill_groups`), so one request's prefill costs its marginal row of n tokens,
    not a forward's fixed cost (`c_base`) each, which would charge a 256-request admission 256 forwards."""

    def prefill_seconds(self, num_tokens: float) -> float:
        if num_tokens <= 0:
            return 0.0
        return self.model.forward_seconds(1, int(round(num_tokens)), num_tokens / 2.0) - self.model.c_base


def predict_makespan(rollout: MeasuredRollout, dispatch: str, num_workers: int, max_num_seqs: int,
                     chunk_size: int, cost_model: CostModel, seed: int = 0) -> float:
    """Seconds from the first dispatch to the last request's end, simulated."""
    n = len(rollout.lengths)
    capacity = float(max_num_seqs * (int(rollout.prompt_tokens.max()) + rollout.max_tokens))
    cost = BatchedPrefillCost(cost_model, capacity)
    mean_prompt = int(round(float(rollout.prompt_tokens.mean())))
    workload = Workload(rollout.lengths, rollout.group_ids, mean_prompt, rollout.max_tokens)
    workers = [_LengthBoundWorker(rollout.lengths, i, 1, capacity, max_num_seqs, mean_prompt)
               for i in range(num_workers)]
    dispatcher = make_dispatcher(dispatch, np.full(n, float(rollout.max_tokens)), rollout.group_ids,
                                 rollout.prompt_tokens, num_workers, chunk_size, rollout.max_tokens, cost, seed)
    acceptance = AcceptanceModel((DrafterProfile("none", 0.5, 1.0),))  # never read: plain decoding
    loop = RolloutLoop(workload, acceptance, np.zeros((1, n)), workers, dispatcher,
                       PlainDecoding(SpecCosts(cost, (None,), (0.0,))), cost, num_workers, LoopConfig())
    return float(np.max(loop.run().finish_seconds))
