"""Tasks by name: adding one is one entry in `_TASK_FACTORIES`."""

from __future__ import annotations

from typing import Callable

from specroll.tasks.base import Task
from specroll.tasks.running_sum import RunningSumTask

_TASK_FACTORIES: dict[str, Callable[[], Task]] = {
    "running_sum": RunningSumTask,
}

DEFAULT_TASK = "running_sum"


def known_tasks() -> list[str]:
    return sorted(_TASK_FACTORIES)


def get_task(name: str) -> Task:
    """The task registered under `name`, with its default settings."""
    if name not in _TASK_FACTORIES:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(known_tasks())}")
    return _TASK_FACTORIES[name]()
