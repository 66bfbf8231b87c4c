"""New weights into the served engine, between forwards: the version moves (the server counts versions
itself, 0, 1, 2, ...), the client's name for it is kept, and the drafters move to it. Every way weights
arrive (a directory posted to /update_weights, a state dict handed over in process) ends here."""

from __future__ import annotations

from typing import Any, Mapping

from specroll.serve.state import ServeState


async def swap_weights(state: ServeState, weights: Mapping[str, Any], name: str | None = None) -> int:
    """Load `weights` (parameter name -> tensor, the checkpoint's names) at the engine thread's next look
    at its inbox; returns the new version. `name` is what the client calls it (slime's
    `weight_version`), answered wherever SGLang answers a version (`ServeState.version_name`).
    A ValueError (a missing or misshapen tensor) comes back from the engine thread unchanged."""
    loop = state.engine_loop

    def swap() -> int:
        loop.engine.load_weights(weights)
        loop.weight_version += 1
        if name is not None:  # named before any token of the new version can be answered
            state.version_names[loop.weight_version] = name
        loop.engine.advance_step(loop.weight_version)  # history and grouped drafters key by version
        return loop.weight_version

    return await loop.call(swap)
