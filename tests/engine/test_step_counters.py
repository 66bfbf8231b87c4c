"""What an engine step asks of the device, counted on the CPU (`engine.step_counters`) and held as
ceilings: one read back to the host a decode step, plain or speculative, eager or at static shapes;
with static shapes, what runs outside the recorded step (on a GPU, launched from Python around the
one graph replay) is a handful of copies and one allocation. The counters themselves on literal cases."""

from __future__ import annotations

import pytest
import torch

from specroll.drafting.oracle import OracleDrafter
from specroll.engine.engine import add_requests
from specroll.engine.step_counters import count_device_work
from specroll.policies.fixed import FixedDraftLength
from helpers import make_engine, workload

WARM_UP = 6  # iterations: every request admitted and prefilled, each static shape met
COUNTED = 3  # decode steps counted after the warm-up

# the tiny Qwen2's (2 layers) decode step under batch-invariant numerics, as measured when these were set
MAX_OPS_EAGER = 175  # launched from Python: on a GPU each a kernel launch
MAX_OPS_RECORDED = 184  # inside the recorded step (the fed token's gather included): one graph replay
MAX_OPS_AROUND_RECORDED = (
    5  # the inputs' copies in, the last tokens for a step fed from them, the results out
)
MAX_ALLOCATIONS_AROUND_RECORDED = 1  # the gathered results read back


def _replayer(engine):
    """The engine's recorded regions: its runner's replayer where it runs static forwards."""
    static = engine.parts_for_testing().runner.static
    return None if static is None else static.replayer


def _steady_steps(model_dir, drafter=None, policy=None, **config) -> list:
    """Counts of COUNTED decode steps once the engine is warm."""
    engine = make_engine(model_dir, drafter, policy, **config)
    assert not add_requests(engine, workload(2, 2, max_tokens=40))
    for _ in range(WARM_UP - 1):
        engine.iterate()
    with count_device_work(_replayer(engine)):  # not kept: it marks what the step in flight reads back
        engine.iterate()
    steps = []
    for _ in range(COUNTED):
        with count_device_work(_replayer(engine)) as counts:
            assert not engine.iterate()  # nothing finishes, nothing is admitted: a decode step
        steps.append(counts)
    return steps


def _oracle() -> OracleDrafter:
    return OracleDrafter({i: [5, 6, 7, 8] * 20 for i in range(4)}, vocab_size=97)


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_a_decode_step_reads_back_once(qwen2_dir, one_thread, speculative, cuda_graphs):
    drafter, policy = (_oracle(), FixedDraftLength(4)) if speculative else (None, None)
    for counts in _steady_steps(qwen2_dir, drafter, policy, cuda_graphs=cuda_graphs):
        assert counts.num_host_reads == 1, counts.reads
        # the eager step's `.cpu()`, or the recorded step's `.to("cpu", non_blocking=True)`
        assert dict(counts.reads) == ({"to": 1} if cuda_graphs else {"cpu": 1})


def test_the_eager_steps_ops_stay_under_their_ceiling(qwen2_dir, one_thread):
    for counts in _steady_steps(qwen2_dir):
        assert 0 < counts.num_ops_launched <= MAX_OPS_EAGER, counts.ops.most_common(10)
        assert counts.num_ops_recorded == counts.num_allocations_recorded == 0


def test_around_the_recorded_step_a_few_copies_and_one_allocation(qwen2_dir, one_thread):
    for counts in _steady_steps(qwen2_dir, cuda_graphs=True):
        assert 0 < counts.num_ops_recorded <= MAX_OPS_RECORDED, counts.ops.most_common(10)
        assert counts.num_ops_launched <= MAX_OPS_AROUND_RECORDED
        assert counts.num_allocations <= MAX_ALLOCATIONS_AROUND_RECORDED


def test_the_counters_on_literal_cases():
    device = torch.arange(6.0)
    with count_device_work() as counts:
        total = (device * 2).sum()
        host = total.cpu()  # one read
        host.item(), host.tolist(), float(host)  # the host's copy: no more reads
        torch.tensor([1, 2]).tolist()  # made on the host
        bool(device[0] > 1)  # a truth value of the device's: a read
        device.nonzero()  # its size depends on the values: a read
        device.to(torch.device("cpu"))  # the compute device: no read
        device.to("cpu").tolist()  # the host named: one read, then the host's copy
    assert counts.num_host_reads == 4
    assert dict(counts.reads) == {"cpu": 1, "__bool__": 1, "nonzero": 1, "to": 1}
    assert counts.ops["mul"] == 1 and counts.ops["sum"] == 1
    assert counts.num_allocations >= 2  # the product and the sum, at least
