"""What importing specroll sets before torch starts: MKL's branch, ATen's kernels, OpenMP's spin."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specroll.cpu_env import ATEN_CAPABILITY, MKL_MODE, host_cpu_flags, pin


def test_pin_sets_mkl_and_aten_where_the_cpu_has_avx2():
    environ: dict[str, str] = {}
    pin(environ, frozenset({"sse2", "avx", "avx2", "avx512f"}))
    assert environ == {"MKL_CBWR": "AVX2,STRICT", "ATEN_CPU_CAPABILITY": "avx2", "GOMP_SPINCOUNT": "10000"}
    assert (MKL_MODE, ATEN_CAPABILITY) == ("AVX2,STRICT", "avx2")


def test_pin_keeps_what_the_user_set_and_asks_no_kernels_the_cpu_lacks():
    environ = {"MKL_CBWR": "AUTO", "ATEN_CPU_CAPABILITY": "default", "GOMP_SPINCOUNT": "0"}
    pin(environ, frozenset({"avx2"}))
    assert environ == {"MKL_CBWR": "AUTO", "ATEN_CPU_CAPABILITY": "default", "GOMP_SPINCOUNT": "0"}
    bare: dict[str, str] = {}
    pin(bare, frozenset({"sse2", "neon"}))  # no AVX2: ATen left to choose (asking would stop the process)
    assert bare == {"MKL_CBWR": "AVX2,STRICT", "GOMP_SPINCOUNT": "10000"}


DESCRIBE = """
import json, specroll
from specroll.model.blas_mode import describe
d = describe()
print(json.dumps([d.mkl_version, d.mkl_branch, d.mkl_strict, d.aten_capability, d.family, d.describe()]))
"""


def _describe_in_a_fresh_process(**env: str) -> list:
    clean = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "ATEN_CPU_CAPABILITY")}
    done = subprocess.run(
        [sys.executable, "-c", DESCRIBE], capture_output=True, text=True, env={**clean, **env}, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fresh_process_runs_the_pinned_numerics_and_says_which():
    import torch

    if not torch.backends.mkl.is_available() or "avx2" not in host_cpu_flags():
        pytest.skip("the pins apply to MKL on an x86-64 CPU with AVX2")
    version, branch, strict, aten, family, line = _describe_in_a_fresh_process()
    assert strict and aten == "AVX2" and version[:1].isdigit()
    assert branch in ("AVX2", "AUTO")  # AUTO where MKL names no branch (a CPU not Intel's)
    assert f"MKL {version} {branch},STRICT; ATen AVX2" in family
    assert line.startswith(f"MKL {version} {branch} branch, strict") and line.endswith("ATen AVX2 kernels")


def test_a_users_own_settings_are_kept_and_reported():
    import torch

    if not torch.backends.mkl.is_available() or "avx2" not in host_cpu_flags():
        pytest.skip("the pins apply to MKL on an x86-64 CPU with AVX2")
    _, _, strict, aten, family, line = _describe_in_a_fresh_process(
        MKL_CBWR="AUTO", ATEN_CPU_CAPABILITY="default"
    )
    assert not strict and aten == "DEFAULT"
    assert "not strict" in line and "STRICT" not in family
