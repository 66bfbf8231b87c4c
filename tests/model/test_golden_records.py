"""The same records on every machine of one CPU numerics family: a seeded SmolLM2 rollout on GSM8K,
plain and speculative, run afresh at the automatic thread count, equals the records committed for
this machine's family (`golden/`, made by `python tests/model/golden_child.py --write [bfloat16]`) to
the bit, in fp32 and in bf16 (whose family adds oneDNN's bf16 code path: AMX, AVX512-BF16).

A family is MKL's version and the branch its GEMMs run, strictly, and ATen's kernels
(`blas_mode.CpuNumerics.family`): pinned at import to MKL's AVX2 branch and ATen's AVX2 kernels, every
Intel CPU with AVX2, with AVX-512 or without, is one family; on AMD, where MKL runs its own AUTO
branch, the CPU's vendor is part of it. Where no MKL runs (an ARM CPU, another BLAS) or no file of
the family is committed, the test says so and skips; in CI, a skip for a missing model fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from golden_child import golden_path
from real_models import require_smollm2

from specroll.model.packed_linear import can_pack
from specroll.placement import invariant_kernels

CHILD = Path(__file__).parent / "golden_child.py"


DTYPES = ("float32", "bfloat16")


def run_child(system: str, dtype: str) -> dict:
    command = [sys.executable, str(CHILD), system, dtype]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=DTYPES)
def fresh_runs(request) -> dict[str, dict]:
    require_smollm2()
    if not torch.backends.mkl.is_available():
        pytest.skip("torch here has no MKL: the golden records are made with MKL's kernels (an ARM CPU?)")
    if (
        request.param == "bfloat16"
        and invariant_kernels("cpu", "bfloat16") != "cpu"
        and not can_pack(torch.bfloat16, "cpu")
    ):
        pytest.skip(
            "bf16's golden records are made on specroll's CPU kernels or oneDNN's, which this CPU lacks"
        )
    return {system: run_child(system, request.param) for system in ("plain", "speculative")}


def golden_of(family: str) -> dict:
    path = golden_path(family)
    if not path.exists():
        pytest.skip(
            f"no golden records for this CPU numerics family ({family}): `python tests/model/golden_child.py "
            f"--write` records them; committed: {sorted(p.name for p in path.parent.glob('*.json'))}"
        )
    return json.loads(path.read_text())


@pytest.mark.parametrize("system", ["plain", "speculative"])
def test_a_fresh_run_equals_the_golden_records_to_the_bit(fresh_runs, system):
    run = fresh_runs[system]
    golden = golden_of(run["family"])
    differing = [i for i, (a, b) in enumerate(zip(run["records"], golden["records"])) if a != b]
    assert len(run["records"]) == len(golden["records"]) == 6
    assert differing == [], (
        f"{system}: records {differing} differ from the golden ones, made as `{golden['cpu']}`; "
        f"this run: `{run['cpu']}`"
    )


def test_the_speculative_run_verified_drafts(fresh_runs):
    """The speculative records are a check only if drafts were verified and some accepted."""
    speculative, plain = fresh_runs["speculative"], fresh_runs["plain"]
    assert speculative["drafted"] > 0 and speculative["accepted"] > 0
    # a batch runs as long as its slowest request: accepted drafts may spare it no forward
    assert speculative["forwards"] <= plain["forwards"]
