"""The elementwise kernels on a GPU, checked without one: compiled for an H100 by Triton's compiler
(`fused_ptx_child.py`), they hold no fused multiply-add, so a product and a sum round apart as torch's
separate kernels round them; each wrapper launches its kernel with contraction off, without which
Triton would fuse them (rotary's fp32 PTX then holds 10, RMSNorm's sum of squares 7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from triton_required import require_triton

require_triton()

import specroll.kernels.add_rms_norm as add_rms_norm  # noqa: E402
import specroll.kernels.rms_norm as rms_norm  # noqa: E402
import specroll.kernels.rotary as rotary  # noqa: E402
import specroll.kernels.silu_mul as silu_mul  # noqa: E402

CHILD = Path(__file__).with_name("fused_ptx_child.py")
REPO = CHILD.parents[2]


def test_the_elementwise_kernels_compile_for_an_h100_without_fused_multiply_adds():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(CHILD)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads(done.stdout)
    launched = {name: n for name, n in counts.items() if not name.endswith("contracted")}
    assert len(launched) == 8 and not any(launched.values()), counts
    assert counts["rotary fp32 contracted"] > 0 and counts["rms_norm fp32 contracted"] > 0, counts


def _launch_options(module, monkeypatch, call) -> dict:
    """The keyword arguments `call` launches its kernel with, through `module`'s `launch`."""
    options = {}
    monkeypatch.setattr(module, "launch", lambda kernel, grid, *args, **kwargs: options.update(kwargs))
    call()
    return options


def test_each_wrapper_launches_with_contraction_off(monkeypatch):
    x, w = torch.ones(2, 8), torch.ones(8)
    q, cos = torch.ones(1, 2, 3, 8), torch.ones(1, 1, 3, 8)
    calls = [
        (rms_norm, lambda: rms_norm.invariant_rms_norm(x, w, 1e-6)),
        (add_rms_norm, lambda: add_rms_norm.invariant_add_rms_norm(x, x, w, 1e-6)),
        (rotary, lambda: rotary.invariant_rotary(q, q, cos, cos)),
        (silu_mul, lambda: silu_mul.invariant_silu_mul(x, x)),
    ]
    for module, call in calls:
        assert _launch_options(module, monkeypatch, call)["enable_fp_fusion"] is False, module.__name__
