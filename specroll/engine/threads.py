"""How many CPU threads torch runs a rollout with, and why: the one place that decides it.

A small model's forwards are too short to split: one thread avoids synchronisation costs (and, on a
shared machine, oversubscription, which we measured slowing a small matmul 60x); a model of 50 M
parameters or more uses every core, where they pay: an automatic choice of several threads times a
probe (the model's widest linear layer at decode's row count) at one thread and at all, interleaved,
and keeps one unless all run it `PAYING_SPEEDUP` times faster. On a machine whose other processes
hold the cores, two OpenMP threads ran a SmolLM2 rollout ten times slower than one.

In exact mode on the CPU more than one thread also needs a BLAS whose bits do not depend on the
thread count or the machine's load (`blas_mode.irreproducibility`) and, under batch-invariant
numerics, a row-count-invariant regime for every layer at that count (`model.batch_invariant`);
where either is missing an automatic choice drops to one thread and an explicit one runs with a
warning. Where both hold, the tokens are the same bits at one thread and at all, so the probe's
verdict changes speed, never tokens.
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specroll.engine.spec import EngineSpec
from specroll.model.blas_mode import irreproducibility
from specroll.model.device import torch_dtype
from specroll.model.runner import batch_invariance_available

LARGE_MODEL = 50_000_000  # parameters from which an automatic choice uses every core
PAYING_SPEEDUP = 1.2  # how much faster all threads must run the probe than one to be chosen
PROBE_ROWS = 16  # a decode step's rows
PROBE_ROUNDS = 7


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
    model = spec.target_config()
    params = model.num_layers * (4 * model.hidden_size**2 + 3 * model.hidden_size * model.intermediate_size)
    if params < LARGE_MODEL:
        return ThreadChoice(1, f"automatic: a model of {params / 1e6:.0f} M parameters runs on one")
    cores = os.cpu_count() or 1
    return ThreadChoice(cores, f"automatic: every core for a model of {params / 1e6:.0f} M parameters")


def probe_speedup(threads: int, hidden: int, intermediate: int, dtype: torch.dtype = torch.float32) -> float:
    """How many times faster `threads` threads run a probe than one: PROBE_ROWS rows through an MLP
    block of the model's shapes (two products, SiLU, a residual and RMSNorm), a parallel region
    each, as a decode step runs them. Timed interleaved over PROBE_ROUNDS rounds (medians), so that
    a load that comes and goes weighs on both alike; leaves torch at `threads` threads. (A probe of
    long products alone ran 1.7x faster at two threads beside a competing process that made the
    rollout itself slower: short regions, whose barriers wait for a thread another process holds,
    are what a step is made of.)"""
    generator = torch.Generator().manual_seed(0)
    up = torch.randn(intermediate, hidden, generator=generator).to(dtype)  # in the model's dtype: bf16
    down = torch.randn(hidden, intermediate, generator=generator).to(dtype)  # runs oneDNN, not the BLAS
    x = torch.randn(PROBE_ROWS, hidden, generator=generator).to(dtype)
    repeats = max(1, int(3e8 / (4 * PROBE_ROWS * hidden * intermediate)))  # ~10 ms at one thread
    timings: dict[int, list[float]] = {1: [], threads: []}
    for _ in range(PROBE_ROUNDS + 1):  # the first round warms up
        for n in (1, threads):
            torch.set_num_threads(n)
            timings[n].append(_timed_block(x, up, down, repeats))
        time.sleep(0.01)  # rounds apart, so that one spell of the scheduler's does not set them all
    torch.set_num_threads(threads)
    return statistics.median(timings[1][1:]) / statistics.median(timings[threads][1:])


def _timed_block(x: torch.Tensor, up: torch.Tensor, down: torch.Tensor, repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        h = F.linear(x, up)
        x = F.rms_norm(x + F.linear(F.silu(h) * h, down), (x.shape[-1],))
    return time.perf_counter() - started


def _threads_that_pay(spec: EngineSpec, choice: ThreadChoice) -> ThreadChoice:
    """`choice` where its threads run the probe PAYING_SPEEDUP times faster than one, else one."""
    model = spec.target_config()
    dtype = torch_dtype(spec.engine.dtype)
    speedup = probe_speedup(choice.threads, model.hidden_size, model.intermediate_size, dtype)
    measured = f"{choice.threads} threads ran a probe {speedup:.2f}x as fast as one"
    if speedup >= PAYING_SPEEDUP:
        return ThreadChoice(choice.threads, f"{choice.reason}; {measured}")
    torch.set_num_threads(1)
    return ThreadChoice(1, f"automatic: one, since {measured} (other processes hold the cores?)")


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
    if automatic and choice.threads > 1:
        choice = _threads_that_pay(spec, choice)
    if spec.engine.batch_invariant and automatic and choice.threads > 1:
        if not batch_invariance_available(spec.model_dir, torch_dtype(spec.engine.dtype)):
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
