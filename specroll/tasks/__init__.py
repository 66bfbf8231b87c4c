"""Verifiable tasks for rollouts: problems plus a rule-based reward. No torch here."""

from specroll.tasks.base import Problem, Task
from specroll.tasks.registry import DEFAULT_TASK, get_task, known_tasks
from specroll.tasks.running_sum import RunningSumTask

__all__ = ["DEFAULT_TASK", "Problem", "RunningSumTask", "Task", "get_task", "known_tasks"]
