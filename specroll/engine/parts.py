"""The engine's parts by name, for tests alone (`Engine.parts_for_testing`): a test that makes the
target's forward fail, watches the recorded step's launches or reads the policy's prices reaches them
here, through a door named as a test's; callers use the engine's front door
(`tests/test_front_door.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from specroll.drafting.protocol import Drafter
from specroll.engine.captured_step import CapturedStep
from specroll.engine.scheduler import Scheduler
from specroll.engine.step import InFlight
from specroll.model.runner import ModelRunner
from specroll.policies.base import SpeculationPolicy


@dataclass(frozen=True)
class EngineParts:
    runner: ModelRunner
    scheduler: Scheduler
    drafter: Drafter | None
    policy: SpeculationPolicy
    captured: CapturedStep | None  # the recorded verification step; None without static forwards
    in_flight: InFlight | None  # the decode step launched ahead, not yet read back
