"""Exact mode's CPU threads: more than one only where the BLAS is reproducible at any thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

from specroll.engine import threads as factory
from specroll.engine.spec import EngineSpec
from specroll.model.blas_mode import irreproducibility

UNREPRODUCIBLE = """
import json
import warnings
import torch
from pathlib import Path
from specroll.engine import threads as factory
from specroll.engine.spec import EngineSpec
from specroll.model.blas_mode import irreproducibility

reason = irreproducibility()
factory.cpu_threads = lambda spec: factory.ThreadChoice(spec.threads or 2, 'test')  # every core
factory.apply_threads(EngineSpec(Path({model!r}), max_tokens=8))
automatic = torch.get_num_threads()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    factory.apply_threads(EngineSpec(Path({model!r}), max_tokens=8, threads=2))
print(json.dumps([reason, automatic, torch.get_num_threads(), [str(w.message) for w in caught]]))
"""


def test_importing_specroll_puts_the_blas_in_its_reproducible_mode():
    if not torch.backends.mkl.is_available():
        pytest.skip("torch here has no MKL")
    assert irreproducibility() is None


def test_two_threads_run_where_the_blas_is_reproducible(qwen2_dir):
    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning where nothing is at risk
            factory.apply_threads(EngineSpec(qwen2_dir, max_tokens=8, threads=2))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_without_the_reproducible_mode_exact_mode_keeps_to_one_thread_or_warns(qwen2_dir):
    """A process whose MKL runs in another mode (set before specroll was imported): the automatic
    choice drops to one thread; an explicit two is kept, with a warning that says why."""
    if not torch.backends.mkl.is_available():
        pytest.skip("torch here has no MKL")
    script = UNREPRODUCIBLE.format(model=str(qwen2_dir))
    env = {**os.environ, "MKL_CBWR": "AUTO"}
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    reason, automatic, explicit, caught = json.loads(done.stdout.strip().splitlines()[-1])
    assert "strict reproducible mode" in reason
    assert (automatic, explicit) == (1, 2)
    assert [m for m in caught if m.startswith("2 CPU threads in exact mode: tokens may change")], caught
