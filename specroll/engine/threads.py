"""How many CPU threads torch runs a rollout with, and why: the one place that decides it.

A small model's forwards are too short to split: one thread avoids synchronisation costs (and, on a
shared machine, oversubscription, which we measured slowing a small matmul 60x); a model of 50 M
parameters or more uses every core. In exact mode on the CPU more than one thread also needs a BLAS
whose bits do not depend on the thread count or the machine's load (`blas_mode.irreproducibility`)
and, under batch-invariant numerics, a row-count-invariant regime for every layer at that count
(`model.batch_invariant`); where either is missing an automatic choice drops to one thread and an
explicit one runs with a warning.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import torch

from specroll.engine.spec import EngineSpec
from specroll.model.blas_mode import irreproducibility
from specroll.model.loader import read_config
from specroll.model.runner import batch_invariance_available

LARGE_MODEL = 50_000_000  # parameters from which an automatic choice uses every core


@dataclass(frozen=True)
class ThreadChoice:
    """The CPU threads a run uses and why, for its summary."""

    threads: int
    reason: str

    def describe(self) -> str:
        return f"{self.threads} thread{'s' if self.threads != 1 else ''} ({self.reason})"


def cpu_threads(spec: EngineSpec) -> ThreadChoice:
    """The spec's threads, or the automatic choice for its model's size (before exactness checks)."""
    if spec.threads > 0:
        return ThreadChoice(spec.threads, "as asked")
    model = read_config(spec.model_dir)
    params = model.num_layers * (4 * model.hidden_size**2 + 3 * model.hidden_size * model.intermediate_size)
    if params < LARGE_MODEL:
        return ThreadChoice(1, f"automatic: a model of {params / 1e6:.0f} M parameters runs on one")
    cores = os.cpu_count() or 1
    return ThreadChoice(cores, f"automatic: every core for a model of {params / 1e6:.0f} M parameters")


def apply_threads(spec: EngineSpec) -> ThreadChoice:
    """Set torch's threads for `spec` and return the choice (see the module's docstring)."""
    choice = cpu_threads(spec)
    automatic = spec.threads == 0
    hazard = _multithread_hazard(spec) if choice.threads > 1 else None
    if hazard is not None and automatic:
        choice = ThreadChoice(1, f"automatic: one, since {hazard}")
    elif hazard is not None:
        warnings.warn(f"{choice.threads} CPU threads in exact mode: {hazard}", stacklevel=2)
    torch.set_num_threads(choice.threads)
    if spec.engine.batch_invariant and automatic and choice.threads > 1:
        if not batch_invariance_available(spec.model_dir):
            torch.set_num_threads(1)
            missing = f"at {choice.threads} some layer has no row-count-invariant BLAS regime"
            choice = ThreadChoice(1, f"automatic: one, since {missing}")
    return choice


def _multithread_hazard(spec: EngineSpec) -> str | None:
    """Why exact mode's tokens could depend on the machine's load at more than one CPU thread, or None."""
    if spec.engine.device != "cpu" or spec.engine.verify != "exact":
        return None
    reason = irreproducibility()
    return None if reason is None else f"tokens may change with the machine's load: {reason}"
