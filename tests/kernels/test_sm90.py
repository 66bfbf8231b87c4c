"""Every kernel compiles for an H100/H200 (sm_90) without a GPU, at the engine's shapes (SmolLM2 and
Qwen2-7B) in fp32 and bf16, with no register spilled: `python -m specroll.kernels.sm90` in a process
of its own (the tests' process runs Triton's interpreter), one row a kernel. docs/gpu.md's table of
registers and shared memory is the same rows (`scripts/gpu_predict.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from triton_required import require_triton

require_triton()

REPO = Path(__file__).resolve().parents[2]
KERNELS = ("linear", "attention", "rms_norm", "add_rms_norm", "rotary", "silu_mul", "softmax", "log_softmax")


def test_every_kernel_compiles_for_sm90_at_the_engines_shapes_without_a_spill():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "specroll.kernels.sm90"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert not [row for row in rows if "error" in row], [row for row in rows if "error" in row]
    # 27 a shape: 5 linear shapes x 2 dtypes, ..., and attention's merge of its key ranges in each dtype
    assert len(rows) == 54, [row["label"] for row in rows]
    for kernel in (*KERNELS, "cumsum", "attention ranges merged"):
        for shape in ("SmolLM2-135M", "Qwen2-7B"):
            assert any(row["label"].startswith(f"{kernel} {shape}") for row in rows), (kernel, shape)
    spilled = [row for row in rows if row["spill_stores"] or row["spill_loads"]]
    assert not spilled, spilled
    assert all(0 < row["registers"] <= 255 and row["shared"] <= 227 * 1024 for row in rows)
