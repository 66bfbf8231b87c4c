"""verl's rollout replica for specroll (`RolloutReplica`, verl 0.9.1): one server actor a replica,
started in every mode verl asks for.

verl's own replicas start their servers on the GPUs of a worker group (hybrid: the trainer's; colocated
and standalone: a resource pool of GPU bundles made for them). The specroll server is one Ray actor
holding its engine: it needs no worker group, so every mode launches it the same way, on a GPU only
where `engine_kwargs.specroll.device` asks for CUDA. Weights still reach it the way verl sends them:
the trainer's workers hold a `ServerAdapter` (`verl_adapter.py`) that hands the server each update."""

from __future__ import annotations

import ray
from verl.single_controller.ray import RayResourcePool, RayWorkerGroup
from verl.workers.rollout.replica import RolloutMode, RolloutReplica

from specroll.integrations.verl_server import SpecrollServer, server_name
from specroll.integrations.verl_settings import wants_gpu


class SpecrollReplica(RolloutReplica):
    async def init_hybrid(self, worker_group: RayWorkerGroup) -> None:
        self.rollout_mode = RolloutMode.HYBRID
        self.workers = self._replica_workers(worker_group)
        await self.launch_servers()

    async def init_hybrid_colocated(
        self, worker_group: RayWorkerGroup, resource_pool: RayResourcePool
    ) -> None:
        self.resource_pool = resource_pool
        await self.init_hybrid(worker_group)

    async def init_colocated(self, resource_pool: RayResourcePool) -> None:
        self.rollout_mode = RolloutMode.COLOCATED
        self.resource_pool = resource_pool
        await self.launch_servers()

    async def init_standalone(self) -> None:
        self.rollout_mode = RolloutMode.STANDALONE
        await self.launch_servers()

    def _replica_workers(self, worker_group: RayWorkerGroup) -> list:
        start = self.world_size * self.replica_rank
        return worker_group.workers[start : start + self.world_size]

    async def launch_servers(self) -> None:
        name = server_name(self.replica_rank, self.name_suffix)
        server = (
            ray.remote(SpecrollServer)
            .options(name=name, max_concurrency=self.max_concurrency, num_gpus=int(wants_gpu(self.config)))
            .remote(self.config, self.model_config, self.replica_rank)
        )
        await server.launch_server.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name  # the load balancer's key; verl reaches it by the handle
