"""verl's rollout server on one specroll engine: the methods verl's replicas and agent loop call on
their vLLM and SGLang server actors (verl 0.9.1: `RolloutReplica`, `LLMServerClient.generate`,
`ServerAdapter`), answered by `specroll.serve.local.LocalServer` in this process.

`SpecrollReplica` runs this class as a Ray actor (`ray.remote(SpecrollServer)`), named
`specroll_server_<replica rank>_0` so a trainer-side `ServerAdapter` finds it as verl's adapters find
theirs. A call is drawn as /inference/v1/generate draws the same body (`verl_requests.generate_body`),
so the records equal `specroll serve`'s and the in-process engine's, to the bit.

Memory calls (`sleep`, `release_kv_cache`, ...) hand nothing back: on a CPU there is no device memory
to free, and on a GPU the engine keeps its cache (as `specroll serve`'s /sleep does). `sleep` pauses
(running requests kept in place) and `wake_up` resumes, so no token is drawn while the trainer holds
the weights."""

from __future__ import annotations

import logging
from typing import Any

from verl.utils.config import omega_conf_to_dataclass
from verl.utils.fs import copy_to_local
from verl.workers.rollout.replica import TokenOutput

from specroll.integrations.verl_requests import check_text_only, generate_body, stop_reason
from specroll.integrations.serve_flags import local_server_from_flags
from specroll.integrations.verl_settings import rollout_lengths, serve_flags
from specroll.serve.local import LocalServer, WeightsSource

log = logging.getLogger(__name__)


def server_name(replica_rank: int, suffix: str = "") -> str:
    """The Ray actor name of a replica's server (verl names its own `vllm_server_<rank>_<node>`)."""
    return f"specroll_server_{replica_rank}_0{suffix}"


class SpecrollServer:
    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        self.config = omega_conf_to_dataclass(config)  # verl's RolloutConfig
        self.model_dir = copy_to_local(model_config.path)  # a local directory as it stands
        self.replica_rank = replica_rank
        self.lengths = rollout_lengths(self.config)
        self.global_steps: int | None = None
        self.server: LocalServer | None = None

    async def launch_server(self) -> None:
        self.server = local_server_from_flags(serve_flags(self.config, self.model_dir))
        await self.server.start()

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: dict | None = None,
        priority: int = 0,
    ) -> TokenOutput:
        check_text_only(image_data=image_data, video_data=video_data, audio_data=audio_data)
        if priority:
            raise ValueError("priority: specroll runs one first-come queue (priority 0 only)")
        body = generate_body(
            list(prompt_ids), sampling_params, request_id, self.lengths, self.config.full_determinism
        )
        generation = await self.server.generate(body)
        choice = generation.choices[0]
        if choice.finish_reason == "error":
            raise RuntimeError(f"request {request_id} failed: {choice.error}")
        return TokenOutput(
            token_ids=list(choice.token_ids),
            log_probs=list(choice.logprobs) if generation.call.logprobs else None,
            stop_reason=stop_reason(choice.finish_reason),
            extra_fields={
                "global_steps": self.global_steps,
                "weight_version": choice.weight_version,
                "seed": generation.call.seed,
                "num_cached_tokens": 0,  # no prefix cache across requests
            },
        )

    async def update_weights(self, weights: WeightsSource, global_steps: int | None = None) -> int:
        """New weights between forwards, from a CPU state dict (the checkpoint's names) or a
        safetensors directory; the server's new weight version."""
        version = await self.server.load_weights(weights)
        if global_steps is not None:
            self.global_steps = global_steps
        return version

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def sleep(self) -> None:
        await self.server.pause("keep")

    async def wake_up(self, tags: list[str] | None = None) -> None:
        await self.server.resume()

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """End every request (their partial tokens come back `aborted`) and hold new ones until
        `resume_generation`; held, not refused, with `reject_request`."""
        count = await self.server.abort_all()
        await self.server.pause("keep")
        return {"aborted_count": count, "request_ids": []}

    async def resume_generation(self) -> None:
        await self.server.resume()

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        count = await self.server.abort(request_id)
        return {"aborted": count > 0, "request_id": request_id}

    async def clear_kv_cache(self) -> None:
        """Nothing stale to drop: the engine keeps no prefix cache across requests."""

    async def release_kv_cache(self) -> None:
        """The cache stays (see the module's docstring)."""

    async def resume_kv_cache(self) -> None:
        """The cache never left."""

    async def start_profile(self, **kwargs: Any) -> None:
        log.info("specroll's rollout server has no profiler hook; `specroll profile` measures the engine")

    async def stop_profile(self) -> None:
        pass
