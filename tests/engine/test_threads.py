"""Exact mode's CPU threads: more than one only where the BLAS is reproducible at any thread count."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

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


SMOLLM2_CONFIG = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check" / "smollm2" / "config.json"
CHOOSE = """
import json, sys
from pathlib import Path
from specroll.engine.spec import EngineSpec
from specroll.engine.threads import apply_threads
choice = apply_threads(EngineSpec(Path(sys.argv[1]), max_tokens=8))
print(json.dumps([choice.threads, choice.reason]))
"""
LOAD = Path(__file__).resolve().parents[2] / "benchmarks" / "matmul_load.py"


@pytest.fixture
def smollm2_config_dir(tmp_path):
    """SmolLM2-135M's configuration alone: the thread choice reads its shapes, never its weights."""
    (tmp_path / "config.json").write_text(SMOLLM2_CONFIG.read_text())
    return tmp_path


def test_a_probe_that_threads_do_not_pay_keeps_one(monkeypatch, smollm2_config_dir):
    spec = EngineSpec(smollm2_config_dir, max_tokens=8)
    monkeypatch.setattr(factory, "cpu_threads", lambda spec: factory.ThreadChoice(2, "automatic: every core"))
    threads = torch.get_num_threads()
    try:
        monkeypatch.setattr(factory, "probe_speedup", lambda *shape: 1.05)
        slow = factory.apply_threads(spec)
        monkeypatch.setattr(factory, "probe_speedup", lambda *shape: 1.7)
        fast = factory.apply_threads(spec)
    finally:
        torch.set_num_threads(threads)
    assert slow == factory.ThreadChoice(
        1,
        "automatic: one, since 2 threads ran a probe 1.05x as fast as one (other processes hold the cores?)",
    )
    assert fast.threads == 2 and fast.reason.endswith("2 threads ran a probe 1.70x as fast as one")


def test_the_automatic_choice_beside_a_competing_process_follows_its_probe(smollm2_config_dir):
    """A fresh process choosing threads for SmolLM2's shapes while another process multiplies
    matrices on all cores but one: it runs the probe and keeps every core only where the probe
    measured them paying. (Whether the load slows the probe is the scheduler's to say: a machine
    whose cores outnumber what it reports ran it 2.07x as fast at two threads beside the load.)"""
    cores = os.cpu_count() or 1
    if cores < 2:
        pytest.skip("one core: nothing to step down from")
    loads = [
        subprocess.Popen([sys.executable, str(LOAD), "--seconds", "120"], stdout=subprocess.PIPE, text=True)
        for _ in range(cores - 1)
    ]
    try:
        assert all(load.stdout.readline().strip() == "busy" for load in loads)  # multiplying already
        done = subprocess.run(
            [sys.executable, "-c", CHOOSE, str(smollm2_config_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for load in loads:
            load.kill()
            load.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    threads, reason = json.loads(done.stdout.strip().splitlines()[-1])
    speedup = float(re.search(r"ran a probe ([0-9.]+)x as fast as one", reason).group(1))
    assert threads == (cores if speedup >= factory.PAYING_SPEEDUP else 1), reason
