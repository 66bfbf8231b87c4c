"""`bench --systems plain,vllm`: vLLM's offline engine beside specroll on the bundled default.

vLLM runs from the environment `make vllm-peer` builds (.venv-vllm/), never from specroll's; where it
is absent the run is skipped, and the make target is checked by a dry run alone.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from specroll.baselines.vllm_peer import DEFAULT_VENV, VllmRun, vllm_python
from specroll.bench import parse_system
from specroll.cli import main

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--num-prompts", "2", "--n", "2", "--max-tokens", "16", "--max-batch-size", "4"]


def test_make_target_builds_the_vllm_environment():
    dry = subprocess.run(["make", "-n", "vllm-peer"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "scripts/vllm_peer_env.sh" in dry.stdout
    assert (ROOT / "scripts" / "vllm_peer_env.sh").exists()
    assert ".venv-vllm/" in (ROOT / ".gitignore").read_text().splitlines()


def test_vllm_systems_are_named():
    assert parse_system("vllm") == ("vllm", "", "")
    assert parse_system("vllm:ngram") == ("vllm", "ngram", "")
    with pytest.raises(ValueError, match="unknown system"):
        parse_system("vllm:medusa-typo")


def test_acceptance_counts_as_specroll_does():
    assert (
        VllmRun(1.0, 2.0, 10, [[[1] * 10]], num_drafts=4, num_accepted_tokens=6).mean_acceptance_length == 2.5
    )
    assert VllmRun(1.0, 2.0, 10, [[[1] * 10]]).mean_acceptance_length is None


@pytest.mark.skipif(
    vllm_python() is None, reason=f"vLLM's environment is missing: `make vllm-peer` ({DEFAULT_VENV})"
)
def test_bench_runs_vllm_beside_plain(capsys):
    assert main(["bench", *TINY, "--systems", "plain,vllm", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["system"] for r in rows] == ["plain", "vllm"]
    plain, vllm = rows
    assert 0 < vllm["output_tokens"] <= 2 * 2 * 16
    assert vllm["tokens_per_second"] > 0 and vllm["paired_vs_plain"] > 0
    assert vllm["startup_seconds"] > 0 and plain["startup_seconds"] is None
