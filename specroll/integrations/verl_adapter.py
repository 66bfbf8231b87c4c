"""The trainer side of verl's weight sync for specroll (`BaseRollout`, verl 0.9.1's "server adapter").

verl builds one in each trainer worker (`get_rollout_class(rollout.name, rollout.mode)`) and, after
an optimizer step, calls `update_weights(weights)` with a generator of (name, tensor) pairs in the
checkpoint's names (its FSDP and Megatron engines gather each tensor whole on every rank). The adapter
copies them to the CPU and hands the state dict to its replica's server actor, found by name as verl's
SGLang adapter finds its server; one rank a replica sends (the first), the others only drain the
generator, so the collective gathers behind it still run on every rank."""

from __future__ import annotations

import os
from typing import Any, Iterable

import ray
import torch
from verl.workers.rollout.base import BaseRollout

from specroll.integrations.verl_server import server_name


class ServerAdapter(BaseRollout):
    def __init__(
        self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, *args, **kwargs
    ) -> None:
        super().__init__(config, model_config, device_mesh)
        world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank // world_size if replica_rank == -1 else replica_rank
        self.is_leader_rank = rank % world_size == 0
        self._server = None

    def _server_handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        peft_config: Any = None,
        **kwargs: Any,
    ) -> None:
        if peft_config is not None:
            raise NotImplementedError(
                "LoRA adapter weights: specroll serves no adapters; merge them into the weights verl sends "
                "(actor_rollout_ref.model.lora.merge=True)"
            )
        if wire_format != "named_tensors":
            raise NotImplementedError(
                f"wire_format {wire_format!r}: specroll takes whole tensors (checkpoint_engine.backend "
                "naive, or any backend that sends named tensors), not delta flushes"
            )
        if not self.is_leader_rank:
            for _ in weights:  # the gathers behind the generator run on every rank
                pass
            return
        state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        await self._server_handle().update_weights.remote(state, global_steps)

    async def resume(self, tags: list[str]) -> None:
        if self.is_leader_rank:
            await self._server_handle().wake_up.remote(tags)

    async def release(self) -> None:
        if self.is_leader_rank:
            await self._server_handle().sleep.remote()
