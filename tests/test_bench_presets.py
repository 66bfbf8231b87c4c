"""`bench --preset NAME`: a named workload fills the workload flags, a flag given wins, an unknown name
is refused naming the known ones; and the clock that reads a rollout's batch over time."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from specroll.bench import BatchClock
from specroll.bench_presets import PRESETS, BenchPreset, get_preset, resolve_workload
from specroll.cli import build_parser, main
from specroll.commands.bench import WORKLOAD_DEFAULTS


def _workload(*flags: str) -> dict:
    args = build_parser("bench").parse_args(["bench", *flags])
    return {name: getattr(args, name) for name in WORKLOAD_DEFAULTS}


def test_a_preset_fills_the_workload():
    assert _workload("--preset", "rl-shape") == {
        "model": "smollm2",
        "task": "gsm8k",
        "num_prompts": 8,
        "n": 8,
        "max_batch_size": 64,
        "max_tokens": 256,
        "temperature": 1.0,
    }
    long_tail = _workload("--preset", "long-tail")
    assert long_tail["max_tokens"] >= 1024
    assert {**long_tail, "max_tokens": 256} == _workload("--preset", "rl-shape")  # the same prompts


def test_a_flag_given_wins_over_its_preset_whatever_its_value():
    """`--n 8` is the preset's value too, and `--max-tokens 512` the rollout's default: given, they hold."""
    workload = _workload("--max-tokens", "512", "--preset", "long-tail", "--n", "4", "--temperature", "0")
    assert (workload["max_tokens"], workload["n"], workload["temperature"]) == (512, 4, 0.0)
    assert workload["num_prompts"] == 8 and workload["max_batch_size"] == 64  # the rest: the preset's


def test_without_a_preset_bench_keeps_its_own_workload():
    assert _workload() == WORKLOAD_DEFAULTS
    assert _workload("--num-prompts", "2")["num_prompts"] == 2


def test_an_unknown_preset_is_refused_naming_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--preset", "rl_shape", "--systems", "plain"])
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and "'rl_shape'" in error and all(f"'{name}'" in error for name in PRESETS)
    with pytest.raises(ValueError, match="known: rl-shape, long-tail"):
        resolve_workload({}, "nope", WORKLOAD_DEFAULTS)


def test_help_lists_the_presets(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert all(f"  {name}: {preset.summary}" in out for name, preset in PRESETS.items())


def test_a_preset_is_validated():
    with pytest.raises(ValueError, match="max_tokens"):
        BenchPreset("", "smollm2", "gsm8k", 8, 8, 64, 0, 1.0)
    with pytest.raises(ValueError, match="temperature"):
        BenchPreset("", "smollm2", "gsm8k", 8, 8, 64, 256, -1.0)
    assert get_preset("long-tail").workload()["max_batch_size"] == 64


def test_the_presets_import_without_torch():
    code = "import sys, specroll.bench_presets, specroll.tail; print('torch' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "False"


def test_the_clock_puts_iterations_on_the_rollouts_clock():
    """The makespan closes just after the last iteration: each end is placed that far before it. The
    hook sees the requests running after an iteration and the finished so far; the batch an iteration
    ran had its finished requests too. 6 requests at batch 4, freed slots refilled at the next step."""
    clock = BatchClock()
    for running, num_finished, waiting in [(4, 0, 2), (3, 1, 2), (3, 2, 1), (2, 4, 0), (0, 6, 0)]:
        clock(SimpleNamespace(num_running=running, num_waiting=waiting), num_finished, 0)
    samples = clock.samples(makespan_seconds=100.0)
    assert samples[-1].seconds == 100.0 and all(a.seconds <= b.seconds for a, b in zip(samples, samples[1:]))
    assert samples[0].seconds > 99.0  # microseconds apart here
    assert [(s.batch_size, s.num_finished, s.num_waiting) for s in samples] == [
        (4, 0, 2),
        (4, 1, 2),
        (4, 1, 1),
        (4, 2, 0),
        (2, 2, 0),
    ]
    assert BatchClock().samples(1.0) == []


def test_bench_reports_the_tail_per_engine_system(capsys):
    """On the bundled model: every engine row carries the tail's and the drain's shares and the batch."""
    small = [
        "--num-prompts",
        "2",
        "--n",
        "3",
        "--max-tokens",
        "24",
        "--max-batch-size",
        "4",
        "--threads",
        "1",
    ]
    assert main(["bench", *small, "--systems", "plain,speculative", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    for row in rows:
        assert 0.0 <= row["tail_share"] <= row["drain_share"] <= 1.0
        assert list(row["batch_at"]) == ["25%", "50%", "75%", "90%"]
        assert all(0 <= b <= 4 for b in row["batch_at"].values())
