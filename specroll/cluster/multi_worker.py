"""A rollout over several workers: the same records as a one-process rollout, and in exact mode the
same tokens (sampling is keyed by request and position, so no token depends on where it ran)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from specroll.cluster.coordinator import ClusterOutcome, Coordinator, ReportHook, WorkerPool
from specroll.engine.request import Request
from specroll.engine.spec import EngineSpec
from specroll.scheduling.dispatch import DISPATCHES, Dispatcher, dense_ids, make_dispatcher


@dataclass(frozen=True)
class ClusterConfig:
    """A rollout's engines and how its requests are dispatched to them (static dispatch shuffles groups
    to workers with the engine's seed)."""

    # engines; more than one runs them on Ray (or inline), coordinated here
    num_workers: int = field(default=1, metadata={"flag": "workers"})
    dispatch: str = "divided"  # static | divided | context-aware (`scheduling.dispatch`)
    chunk_tokens: int = 0  # divided dispatch: tokens a request generates before it is re-dispatched;
    # 0 = a quarter of max_tokens (Seer's 8K chunks of 32K-64K budgets)
    # ray | inline (every worker in this process, called in turn)
    backend: str = field(default="ray", metadata={"flag": "worker_backend"})
    fastest_of_n: bool = False  # idle workers run copies of stragglers (exact, batch-invariant mode only)

    def __post_init__(self) -> None:
        if self.num_workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.num_workers}")
        if self.dispatch not in DISPATCHES:
            raise ValueError(f"dispatch must be one of {', '.join(DISPATCHES)}, got {self.dispatch!r}")
        if self.chunk_tokens < 0:
            raise ValueError(f"chunk_tokens must be >= 0, got {self.chunk_tokens}")
        if self.backend not in ("ray", "inline"):
            raise ValueError(f"backend must be ray or inline, got {self.backend!r}")

    def chunk_size(self, max_tokens: int) -> int:
        return self.chunk_tokens or max(1, max_tokens // 4)


def make_cluster_dispatcher(
    cluster: ClusterConfig, requests: list[Request], max_tokens: int, seed: int
) -> Dispatcher:
    """The dispatcher the config names; a request's length is unknown here, so it may run to max_tokens."""
    return make_dispatcher(
        cluster.dispatch,
        np.full(len(requests), float(max_tokens)),
        dense_ids([r.group_id for r in requests]),
        np.array([len(r.prompt_token_ids) for r in requests]),
        cluster.num_workers,
        cluster.chunk_size(max_tokens),
        max_tokens,
        seed,
    )


def make_pool(cluster: ClusterConfig, spec: EngineSpec, longest_prompt: int) -> WorkerPool:
    """Workers that each build an engine from `spec` (imported here: the coordinator needs no torch)."""
    if cluster.backend == "inline":
        from specroll.cluster.engine_worker import EngineWorker
        from specroll.cluster.inline_pool import InlinePool

        return InlinePool(cluster.num_workers, lambda i: EngineWorker(i, spec, longest_prompt))
    from specroll.cluster.ray_pool import RayPool

    return RayPool(cluster.num_workers, spec, longest_prompt)


ProgressHook = Callable[[int, int], None]  # finished requests, output tokens so far


def run_cluster(
    cluster: ClusterConfig,
    spec: EngineSpec,
    requests: list[Request],
    longest_prompt: int,
    on_report: ReportHook | None = None,
    progress: ProgressHook | None = None,
) -> ClusterOutcome:
    """Run `requests` over the cluster's workers, each with an engine built from `spec`; the requests
    are read, never written (results: `ClusterOutcome.outputs`). The pool is closed at the end,
    whatever happens."""
    pool = make_pool(cluster, spec, longest_prompt)
    try:
        hooks = [h for h in (on_report, _progress_hook(progress)) if h is not None]
        coordinator = Coordinator(
            requests,
            make_cluster_dispatcher(cluster, requests, spec.max_tokens, spec.engine.seed),
            pool,
            kv_capacity=float(spec.engine.max_batch_size * (longest_prompt + spec.max_tokens)),
            max_num_seqs=spec.engine.max_batch_size,
            on_report=(lambda c, w: [h(c, w) for h in hooks]) if hooks else None,
            fastest_of_n=cluster.fastest_of_n,
        )
        return coordinator.run()
    finally:
        pool.close()


def _progress_hook(progress: ProgressHook | None) -> ReportHook | None:
    if progress is None:
        return None
    last = [0.0]

    def hook(coordinator: Coordinator, worker: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 0.2:
            last[0] = now
            states = coordinator.states
            progress(sum(s.is_finished for s in states), sum(len(s.token_ids) for s in states))

    return hook
