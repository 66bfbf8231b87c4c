"""specroll as a rollout backend of verl (0.9.1): `actor_rollout_ref.rollout.name=specroll`.

verl's agent loop does not call its inference servers over HTTP: it holds replicas
(`RolloutReplicaRegistry`) whose servers are Ray actors answering
`generate(prompt_ids, sampling_params, request_id) -> TokenOutput`, and its trainer workers push weights
through a "server adapter" (`get_rollout_class`). Importing this module registers specroll in both, as
verl registers its vLLM and SGLang backends:
- `specroll.integrations.verl_replica.SpecrollReplica`: one server actor a replica;
- `specroll.integrations.verl_server.SpecrollServer`: that actor, one specroll engine in process
  (`specroll.serve.local.LocalServer`), so its records equal `specroll serve`'s to the bit;
- `specroll.integrations.verl_adapter.ServerAdapter`: the trainer side, handing each weight update to
  the server as a CPU state dict.

Every verl process must import it before verl looks the name up; verl's own hook does that:

    VERL_USE_EXTERNAL_MODULES=specroll.integrations.verl python -m verl.trainer.main_ppo \\
        actor_rollout_ref.rollout.name=specroll \\
        +actor_rollout_ref.rollout.engine_kwargs.specroll.speculate=on ...

(Ray's workers inherit the variable from the driver.) `engine_kwargs.specroll` takes `specroll serve`'s
flags by name (`verl_settings.py`).
"""

from __future__ import annotations

from verl.workers.rollout import base, replica

NAME = "specroll"


def _load_replica() -> type:
    from specroll.integrations.verl_replica import SpecrollReplica

    return SpecrollReplica


def register() -> None:
    """Make `rollout.name=specroll` resolve in verl's two registries (idempotent)."""
    replica.RolloutReplicaRegistry.register(NAME, _load_replica)
    base._ROLLOUT_REGISTRY[(NAME, "async")] = "specroll.integrations.verl_adapter.ServerAdapter"


register()
