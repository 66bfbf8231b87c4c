"""`make gpu-check`'s script, run here as CI runs it: the smoke mode on the CPU, every network path
closed, nothing pulled. Every part must run and write its file; the part that needs CUDA must say so
rather than pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "scripts" / "gpu_check.py"
PARTS = ("model", "exact", "kernels", "profile", "tests", "bench-128", "bench-64", "trace")


def _smoke(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "PIP_NO_INDEX": "1",
        "HF_HUB_OFFLINE": "1",
        "SPECROLL_HOME": str(tmp_path / "empty-home"),
        "PARTS": "",
    }
    command = [sys.executable, str(SCRIPT), "--smoke", "--work", str(tmp_path / "work"), *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600), out


def _outcomes(out: Path) -> dict[str, str]:
    rows = (out / "summary.txt").read_text().splitlines()[1:]
    return {row.split()[0]: row.split(maxsplit=1)[1] for row in rows}


def test_every_part_runs_offline_and_writes_its_file(tmp_path):
    done, out = _smoke(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = _outcomes(out)
    assert tuple(outcomes) == PARTS
    for part in PARTS:
        expected = "needs CUDA" if part == "tests" else "passed"
        assert outcomes[part].startswith(expected), (part, outcomes[part], (out / f"{part}.txt").read_text())
        assert (out / f"{part}.txt").stat().st_size > 0
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{p}.txt" for p in PARTS] + ["summary.txt"])
    assert (out / "tests.txt").read_text().startswith("needs CUDA")
    assert "skipped" in (out / "tests.txt").read_text()  # the GPU tests skip on the CPU: not a pass
    exact = (out / "exact.txt").read_text()  # speculative against plain, request by request, in smoke sizes
    assert "| float32 | 4 | 4/4 (drafted" in exact and "every request equal to plain's, to the bit" in exact
    bench = (out / "bench-64.txt").read_text()
    for system in ("plain-serial", "plain-eager", "oracle:fixed-4", "hf-generate"):
        assert system in bench


def test_one_part_reruns_alone_and_an_unknown_part_is_refused(tmp_path):
    done, out = _smoke(tmp_path, "--parts", "trace")
    assert done.returncode == 0, done.stdout + done.stderr
    assert tuple(_outcomes(out)) == ("model", "trace")  # the model is built first where it is missing
    done, out = _smoke(tmp_path, "--parts", "nonsense")
    assert done.returncode != 0 and "unknown parts ['nonsense']" in done.stderr


def test_the_full_checks_caps_fit_ten_minutes_and_the_tests_part_needs_no_model():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = script  # dataclasses look their module up there
    spec.loader.exec_module(script)
    assert tuple(p.name for p in script.PARTS) == PARTS
    assert sum(p.cap_seconds for p in script.PARTS) <= 600
    assert [p.name for p in script.PARTS if not p.needs_model] == ["model", "tests"]
