"""Overlap on a CUDA device: each plain decode step is launched before the previous one is read back
(`Engine.iterate`), its fed token gathered inside the recorded graph, and its results copied into
pinned memory behind an event. Records equal the sequential engine's to the bit, in bf16 and fp32.
Skipped where torch sees no GPU (tests/engine/test_overlap.py runs the same path eagerly on the CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from helpers import assert_same_rollout, rollout, workload  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ON_CUDA = dict(device="cuda", batch_invariant=True, cuda_graphs=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_overlapped_decoding_equals_sequential_to_the_bit_on_cuda(qwen2_dir, dtype):
    sequential = rollout(qwen2_dir, workload(), **ON_CUDA, dtype=dtype, overlap=False)
    overlapped = rollout(qwen2_dir, workload(), **ON_CUDA, dtype=dtype)
    assert_same_rollout(sequential, overlapped)
    telemetry = rollout.last_engine.telemetry
    assert telemetry.steps_launched_ahead > len(telemetry.decode_forwards) / 2


def test_a_launched_steps_results_arrive_in_pinned_memory_behind_an_event(qwen2_dir):
    from specroll.engine.engine import add_requests
    from helpers import make_engine

    engine = make_engine(qwen2_dir, **ON_CUDA)
    assert not add_requests(engine, workload(2, 2, max_tokens=20))
    for _ in range(3):
        engine.iterate()
    in_flight = engine.parts_for_testing().in_flight
    assert in_flight is not None and in_flight.launched.ready is not None
    assert in_flight.launched.results.is_pinned()
