"""Tasks by name. Built-in tasks are entries in `_TASK_FACTORIES`; users add theirs with `register_task`:

register_task("my_qa", lambda: JsonlTask(Path("qa.jsonl"), reward_name="numeric"))
run_rollout(RolloutConfig(task="my_qa"))
"""

from __future__ import annotations

from typing import Callable

from specroll.tasks.task import Task
from specroll.tasks.gsm8k import Gsm8kTask
from specroll.tasks.running_sum import RunningSumTask
from specroll.tasks.registration import add_entry

TaskFactory = Callable[[], Task]

_TASK_FACTORIES: dict[str, TaskFactory] = {"running_sum": RunningSumTask, "gsm8k": Gsm8kTask}

DEFAULT_TASK = "running_sum"
_TASK_MEMBERS = ("name", "use_chat_template", "problems", "reward")


def known_tasks() -> list[str]:
    return sorted(_TASK_FACTORIES)


def get_task(name: str) -> Task:
    """The task registered under `name`, with its default settings."""
    if name not in _TASK_FACTORIES:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(known_tasks())}")
    task = _TASK_FACTORIES[name]()
    missing = [member for member in _TASK_MEMBERS if not hasattr(task, member)]
    if missing:
        raise ValueError(
            f"task {name!r} lacks {', '.join(missing)}: a task needs "
            f"{', '.join(_TASK_MEMBERS)} (see specroll.tasks.task.Task)"
        )
    return task


def register_task(name: str, factory: TaskFactory, *, replace: bool = False) -> None:
    """Make `factory()` (a `Task`) available as the task `name`, to `RolloutConfig(task=name)`."""
    add_entry(_TASK_FACTORIES, "task", name, factory, "needs a factory called with no arguments", replace)
