"""Engines on Ray run at the calling process's priority, not Ray's default worker niceness of 15."""

from __future__ import annotations

import os

import ray

from specroll.cluster.ray_pool import RayPool
from specroll.rollout import RolloutConfig


def test_engine_workers_are_not_niced_below_the_coordinator():
    assert not ray.is_initialized()  # the pool starts Ray itself, as `rollout --workers` does
    spec = RolloutConfig(num_prompts=1, n=2, max_tokens=8, speculate="off").engine_spec()
    pool = RayPool(2, spec, longest_prompt=64)
    try:
        niceness = ray.get([actor.__ray_call__.remote(lambda _: os.nice(0)) for actor in pool._actors])
        assert niceness == [os.nice(0)] * 2
    finally:
        pool.close()
