"""A measured rollout's forwards priced under another device's cost profile: what the same run would
take there, from a run on this machine. Imports no torch.

The forwards are the ones the run made (its telemetry: each verification forward's rows, and each
row's drafted and accepted tokens), so the acceptance is the one measured. Each is priced by the
profile (`CostModel.forward_seconds`) at its batch size, its width (the fed token and the widest
draft: rows are padded to it) and its rows' mean cached positions (a row's prompt and the tokens it
had emitted). The requests a forward verifies for the first time were admitted together: they are
priced as one prefill, as the simulator prices one (`roofline.prefill_seconds`). Drafting keeps the
seconds measured here, less a drafter's one-time catch-up (`ForwardStats.steady_seconds`): a
model-free drafter works on the host on any device; a model drafter's forwards stay at this machine's
price. Not priced: the host's work around each forward (scheduling, packing, reading back, commit),
which a profile's bare forwards do not hold; on an H100 it was 40 % of plain decoding's step at batch
128 (BENCHMARKS.md, "On an H100").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from specroll.policies.base import ForwardStats
from specroll.policies.cost_model import CostModel
from specroll.sim.profiled_cost import ProfiledCost
from specroll.sim.roofline import prefill_seconds


@dataclass(frozen=True)
class Projection:
    """Seconds of a measured run's work under a profile's prices."""

    forward_seconds: float  # the verification (and decode) forwards
    prefill_seconds: float
    draft_seconds: float  # as measured here, less catch-up
    num_forwards: int

    @property
    def makespan_seconds(self) -> float:
        return self.forward_seconds + self.prefill_seconds + self.draft_seconds


def project(
    forwards: Sequence[ForwardStats], prompt_tokens: Mapping[int, int], cost: CostModel
) -> Projection:
    """The run whose verification forwards are `forwards` (in order), with `prompt_tokens` by request
    id, priced by `cost`."""
    emitted: dict[int, int] = {}  # request id -> tokens emitted so far (its prefill emits one)
    forward_s = prefill_s = draft_s = 0.0
    for stats in forwards:
        admitted = [i for i in stats.request_ids if i not in emitted]
        if admitted:
            prefill_s += prefill_seconds(ProfiledCost(cost), [prompt_tokens[i] for i in admitted])
            emitted.update(dict.fromkeys(admitted, 1))
        forward_s += cost.forward_seconds(
            stats.batch_size, width(stats), mean_context(stats, prompt_tokens, emitted)
        )
        draft_s += stats.draft_seconds - stats.upkeep_seconds
        for request_id, accepted in zip(stats.request_ids, stats.accepted):
            emitted[request_id] += accepted + 1
    return Projection(forward_s, prefill_s, draft_s, len(forwards))


def width(stats: ForwardStats) -> int:
    """Tokens a row: the fed token and the widest draft (a tree's nodes), as the rows are padded."""
    return 1 + max(stats.drafted, default=0)


def mean_context(stats: ForwardStats, prompt_tokens: Mapping[int, int], emitted: Mapping[int, int]) -> float:
    """The rows' mean cached positions: a row's prompt and its emitted tokens but the one it feeds."""
    cached = [prompt_tokens[i] + emitted[i] - 1 for i in stats.request_ids]
    return sum(cached) / len(cached) if cached else 0.0
