"""Verifiable tasks for rollouts: problems plus a rule-based reward. No torch here."""

from specroll.tasks.task import Problem, Task
from specroll.tasks.gsm8k import Gsm8kTask
from specroll.tasks.jsonl import JsonlTask
from specroll.tasks.task_names import DEFAULT_TASK, get_task, known_tasks, register_task
from specroll.tasks.rewards import get_reward, known_rewards, register_reward
from specroll.tasks.running_sum import RunningSumTask

__all__ = [
    "DEFAULT_TASK",
    "Gsm8kTask",
    "JsonlTask",
    "Problem",
    "RunningSumTask",
    "Task",
    "get_reward",
    "get_task",
    "known_rewards",
    "known_tasks",
    "register_reward",
    "register_task",
]
