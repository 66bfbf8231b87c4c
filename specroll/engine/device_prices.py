"""Prices an engine measures on its own device when no profile of that device was found.

A profile prices forwards only on the device type it was measured on (`CostModel.device`), and the
policies' default prices (`DEFAULT_COST_MODEL`) are a CPU's: on a GPU they would misprice every step.
An engine off the CPU without a profile of its device therefore times a few seconds of its own
forwards before the rollout (`ProfileGrid.quick`) and fits its cost model to them, as `specroll
profile` does at length.
"""

from __future__ import annotations

import sys

from specroll.model.runner import ModelRunner
from specroll.policies.cost_model import CostModel
from specroll.policies.profile_grid import ProfileGrid
from specroll.profiling import profile_runner


def needs_device_profile(device: str, cost_model: CostModel | None, is_speculating: bool) -> bool:
    """Whether the engine must measure its own prices: it may draft (without drafts its policy prices
    nothing), no profile of its device was found, and the device is not the CPU (whose prices are the
    policies' default)."""
    return is_speculating and cost_model is None and device != "cpu"


def measure_device_prices(runner: ModelRunner, max_draft: int, model_name: str) -> CostModel:
    """The cost model of `runner`'s forwards on its device, over a quick grid that fills its slots and
    cache (`ProfileGrid.quick`); says so in one line."""
    device = runner.device.type
    print(
        f"specroll: no {device} cost profile for {model_name}: measuring prices on the {device} (a few "
        f"seconds); `specroll profile --model {model_name} --device {device}` writes one",
        file=sys.stderr,
    )
    max_context = runner.cache.capacity - (max_draft + 1)  # room for the widest forward
    grid = ProfileGrid.quick(runner.cache.num_slots, max_draft, max_context)
    return profile_runner(runner, grid, source=f"{model_name} on {device}, measured by the engine")[0]
