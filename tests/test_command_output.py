"""What the commands print when their output is a file or a pipe (a log, CI): every figure whole, and
progress as lines while a long step runs."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from specroll.commands.progress import ProgressLines
from specroll.cpu_env import cpuinfo_field
from specroll.commands.tables import TextTable

WORKLOAD = ["--num-prompts", "2", "--n", "4", "--max-tokens", "32"]


def _run(*argv: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECROLL_PROGRESS_SECONDS": "0", "COLUMNS": "80"}
    command = [sys.executable, "-m", "specroll.cli", *argv]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_a_piped_bench_table_holds_every_figure_and_each_round_shows(tmp_path):
    systems = "plain,speculative,hf-generate"
    done = _run("bench", *WORKLOAD, "--systems", systems, "--repeats", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    as_json = _run("bench", *WORKLOAD, "--systems", systems, "--json", cwd=tmp_path)
    rows = json.loads(as_json.stdout.strip().splitlines()[-1])["rows"]
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    header, body = table[0], table[1:]
    assert "…" not in done.stdout and len(body) == 3
    assert header.count("vs plain, paired") == 1 and "tokens a forward" in header
    for line, row in zip(body, rows):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == row["system"] and cells[2] == str(row["output_tokens"])  # whole, not cut
        assert len(cells) == len(header.strip("|").split("|"))
    for number in (1, 2):
        for system in systems.split(","):
            assert f"bench: round {number}/2, {system}: running" in done.stderr  # as it begins
            assert f"bench: round {number}/2, {system}: " in done.stderr
    assert done.stderr.index("bench: warm-up (one short rollout): running") < done.stderr.index("round 1/2")
    assert f"{platform.machine()}, {cpuinfo_field('model name')}, 2 round(s)" in done.stdout


def test_a_rollout_written_to_a_pipe_prints_progress_lines_and_a_markdown_summary(tmp_path):
    out = tmp_path / "r.jsonl"
    done = _run("rollout", *WORKLOAD, "--out", str(out), "--telemetry", "none", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("rollout: ")]
    assert len(lines) >= 2 and lines[-1].startswith("rollout: 8/8 requests")
    assert lines[0].startswith("rollout: 0/8 requests, 0 s, loading policy, then the first prefills")
    assert "speed-up over plain decoding: `specroll bench --systems plain,speculative`" in done.stdout
    assert "\r" not in done.stderr
    assert "| tokens a forward (per request: accepted drafts + 1) |" in done.stdout
    assert "(drafter draft-model)" in done.stdout  # the drafter `--speculate on` chose, named
    assert out.is_file() and out.with_suffix(".provenance.json").is_file()
    assert not out.with_suffix(".telemetry.jsonl").exists()


def test_progress_lines_at_their_interval_and_once_at_the_end(tmp_path):
    with open(tmp_path / "log", "w") as stream:
        progress = ProgressLines("features", "responses", stream=stream, interval=3600)
        for done in range(1, 6):
            progress(done, 5)
        progress(5, 5, "done")
    lines = (tmp_path / "log").read_text().splitlines()
    assert [line.split(",")[0] for line in lines] == ["features: 1/5 responses", "features: 5/5 responses"]


def test_a_markdown_table_refuses_a_row_of_the_wrong_width():
    table = TextTable("t", ["a", "b"])
    table.add_row("1", "2")
    assert table.markdown().splitlines()[-1] == "| 1 | 2 |"
    with pytest.raises(ValueError, match="1 cells in a table of 2 columns"):
        table.add_row("1")
