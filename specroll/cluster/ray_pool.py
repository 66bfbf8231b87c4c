"""Workers as Ray actors, each an `EngineWorker` in its own process; Ray local to this machine,
bound to loopback unless a cluster is already running (`ray.init` called by the user)."""

from __future__ import annotations

import os
from typing import Any

from specroll.cluster.coordinator import WorkerLost
from specroll.cluster.engine_worker import EngineWorker
from specroll.cluster.work import WorkerReport, WorkerTelemetry, WorkItem
from specroll.engine.spec import EngineSpec

START_TIMEOUT_SECONDS = 600.0


class WorkerStartError(RuntimeError):
    """A worker could not start (its engine failed to build, or Ray could not place it)."""


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError(
            "a rollout over several workers runs them on Ray: pip install 'specroll[ray]' "
            "(or pip install ray)"
        ) from None
    return ray


class RayPool:
    def __init__(
        self, num_workers: int, spec: EngineSpec, longest_prompt: int, cpus_per_worker: float = 1.0
    ) -> None:
        ray = _ray()
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            # worker_niceness 0: Ray starts workers at niceness 15, which on a shared machine leaves the
            # engines only what every other process (the coordinator included) does not take
            ray.init(
                num_cpus=max(num_workers * cpus_per_worker, os.cpu_count() or 1),
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                log_to_driver=True,
                logging_level="WARNING",
                _system_config={"worker_niceness": 0},
            )
        actor = ray.remote(num_cpus=cpus_per_worker, max_restarts=0)(EngineWorker)
        self.num_workers = num_workers
        self._actors = [actor.remote(i, spec, longest_prompt) for i in range(num_workers)]
        self._calls: dict[Any, int] = {}  # object ref -> worker
        self._alive = [True] * num_workers
        self._wait_until_ready()

    def _wait_until_ready(self) -> None:
        ray = _ray()
        for index, actor in enumerate(self._actors):
            try:
                ray.get(actor.ready.remote(), timeout=START_TIMEOUT_SECONDS)
            except Exception as err:  # RayActorError, GetTimeoutError: the cause is in the message
                self.close()
                raise WorkerStartError(f"worker {index} could not start: {_cause(err)}") from None

    def submit(self, worker: int, items: list[WorkItem], drop: list[int]) -> None:
        if self.in_flight(worker):
            raise RuntimeError(f"worker {worker} already has a call in flight")
        self._calls[self._actors[worker].advance.remote(items, drop)] = worker

    def in_flight(self, worker: int) -> bool:
        return worker in self._calls.values()

    def next_report(self) -> tuple[int, WorkerReport | WorkerLost]:
        """The first call to come back; a worker whose call failed is lost (and stopped)."""
        ray = _ray()
        [ref], _ = ray.wait(list(self._calls), num_returns=1)
        worker = self._calls.pop(ref)
        try:
            return worker, ray.get(ref)
        except Exception as err:  # the actor died, or its engine raised
            self.kill(worker)
            return worker, WorkerLost(_cause(err))

    def kill(self, worker: int) -> None:
        """Stop a worker's process (its calls in flight then fail: the coordinator re-dispatches)."""
        if self._alive[worker]:
            self._alive[worker] = False
            _ray().kill(self._actors[worker], no_restart=True)

    def telemetry(self) -> list[WorkerTelemetry]:
        ray = _ray()
        live = [i for i in range(self.num_workers) if self._alive[i]]
        return ray.get([self._actors[i].telemetry.remote() for i in live])

    def close(self) -> None:
        ray = _ray()
        for worker in range(self.num_workers):
            self.kill(worker)
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()


def _cause(err: Exception) -> str:
    """The first line of a Ray error that names the cause, not Ray's framing."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    causes = [line for line in lines if "Error:" in line and not line.startswith("ray.")]
    return causes[-1] if causes else (lines[0] if lines else type(err).__name__)
