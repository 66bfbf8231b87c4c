"""The command line on the bundled default: rollout JSONL and summary, bench JSON, bad flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specroll.cli import main

SMALL = ["--num-prompts", "4", "--n", "3", "--max-tokens", "64", "--max-batch-size", "8"]
FIELDS = {"prompt_id", "sample", "token_ids", "logprobs", "text", "reward", "finish_reason"}


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rollout_writes_records_and_telemetry(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["rollout", *SMALL, "--out", str(out), "--no-progress"]) == 0
    records = read_jsonl(out)
    assert len(records) == 12 and FIELDS <= set(records[0])
    assert {(r["prompt_id"], r["sample"]) for r in records} == {(p, s) for p in range(4) for s in range(3)}
    for r in records:
        assert len(r["token_ids"]) == len(r["logprobs"]) > 0
        assert r["finish_reason"] in ("stop", "length") and r["reward"] in (0.0, 1.0)
    assert read_jsonl(out.with_suffix(".telemetry.jsonl"))
    assert "tokens a forward" in capsys.readouterr().out


@pytest.mark.parametrize("graphs", ["off", "on"])
def test_speculative_and_plain_rollouts_are_identical(tmp_path, graphs):
    """Speculation on against off; with --cuda-graphs on (run eagerly here), the speculative rollout's
    forwards are the static-shape ones a GPU replays, and its records are still plain's bits."""
    plain, spec = tmp_path / "plain.jsonl", tmp_path / "spec.jsonl"
    assert main(["rollout", *SMALL, "--speculate", "off", "--out", str(plain), "--no-progress"]) == 0
    on = ["--speculate", "on", "--cuda-graphs", graphs]
    assert main(["rollout", *SMALL, *on, "--out", str(spec), "--no-progress"]) == 0
    a, b = read_jsonl(plain), read_jsonl(spec)
    assert len(a) == len(b)
    assert [r["token_ids"] for r in a] == [r["token_ids"] for r in b]
    # batch-invariant numerics: the same bits, not merely close (a verification forward of width 3
    # and a 1-token decode round alike)
    assert [r["logprobs"] for r in a] == [r["logprobs"] for r in b]
    telemetry = read_jsonl(spec.with_suffix(".telemetry.jsonl"))
    assert sum(row["num_drafted"] for row in telemetry) > 0, "speculation never verified a draft"
    assert sum(row["num_accepted"] for row in telemetry) > 0, "speculation never accepted a draft"


def test_bench_json(capsys):
    assert main(["bench", *SMALL, "--systems", "plain,speculative,oracle,hf-generate", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["system"] for r in rows] == ["plain", "speculative", "oracle", "hf-generate"]
    for r in rows:
        assert r["makespan_seconds"] > 0 and r["output_tokens"] > 0 and r["tokens_per_second"] > 0
    assert rows[2]["mean_acceptance_length"] > rows[0]["mean_acceptance_length"]


def test_bench_names_drafters_and_policies(capsys):
    systems = ["speculative/prompt-lookup", "speculative:fixed-2/own-context", "oracle:fixed-4"]
    assert main(["bench", *SMALL, "--systems", ",".join(systems), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["system"] for r in rows] == systems
    assert all(r["output_tokens"] > 0 for r in rows)
    # the fixed caps drafted, and drafts were accepted (whether `auto` drafts depends on its timing)
    assert all(r["mean_acceptance_length"] > 1 for r in rows[1:])
    assert main(["bench", *SMALL, "--systems", "plain/prompt-lookup"]) == 2
    assert "unknown system 'plain/prompt-lookup'" in capsys.readouterr().err


def test_bench_refuses_a_head_it_cannot_use_before_any_round(tmp_path, capsys):
    assert main(["bench", *SMALL, "--systems", f"plain,speculative@{tmp_path}"]) == 2
    assert f"{tmp_path} holds no draft head for" in capsys.readouterr().err
    assert main(["bench", *SMALL, "--systems", f"plain@{tmp_path}"]) == 2
    assert "only speculative systems name a draft head" in capsys.readouterr().err


def test_bench_prices_batch_invariant_numerics(capsys):
    assert main(["bench", *SMALL, "--systems", "plain,plain-fast", "--json"]) == 0
    plain, fast = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert fast["system"] == "plain-fast" and fast["forward_passes"] > 0
    assert fast["mean_acceptance_length"] == plain["mean_acceptance_length"] == 1.0  # neither speculates


def test_bench_repeats_report_medians_and_paired_ratios(capsys):
    assert main(["bench", *SMALL, "--systems", "plain,oracle", "--repeats", "3", "--json"]) == 0
    plain, oracle = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    for row in (plain, oracle):
        assert (
            len(row["makespans_seconds"]) == 3
            and row["makespan_seconds"] == sorted(row["makespans_seconds"])[1]
        )
    assert plain["paired_vs_plain"] == 1.0 and plain["paired_rounds_vs_plain"] == [1.0] * 3
    assert oracle["paired_vs_plain"] > 1.0  # the oracle drafts the very tokens, so it is faster
    rounds = oracle["paired_rounds_vs_plain"]
    assert len(rounds) == 3 and oracle["paired_vs_plain"] == sorted(rounds)[1]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--temperature", "-1"], "temperature"),
        (["--top-p", "0"], "top_p"),
        (["--max-tokens", "0"], "max_tokens"),
        (["--speculate", "nonsense"], "unknown drafter"),
        (["--policy", "nonsense"], "unknown policy"),
        (["--model", "/nonexistent"], "does not exist"),
        *(
            [(["--device", "cuda"], "--device cuda: CUDA is not available")]
            if not torch.cuda.is_available()
            else []
        ),
    ],
)
def test_bad_flags_give_clear_errors(flags, message, tmp_path, capsys):
    assert main(["rollout", *SMALL, *flags, "--out", str(tmp_path / "x.jsonl"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1  # one line, no traceback


@pytest.mark.parametrize("command", ["rollout", "bench", "serve"])
def test_the_cost_model_flag_reaches_the_config(command, tmp_path):
    from specroll.cli import build_parser
    from specroll.commands.rollout import config_from_args

    path = tmp_path / "fit.cost.json"
    args = build_parser(command).parse_args([command, "--cost-model", str(path), "--device", "cpu"])
    assert config_from_args(args).cost_model == path
    assert config_from_args(build_parser(command).parse_args([command, "--device", "cpu"])).cost_model is None


def test_a_cost_model_of_another_device_is_a_one_line_error(tmp_path, capsys):
    from specroll.policies.cost_model import CostModel

    path = tmp_path / "gpu.cost.json"
    CostModel(c_base=1e-5, c_tok=1e-7, device="cuda").save(path)
    flags = ["--device", "cpu", "--cost-model", str(path), "--no-progress"]
    assert main(["rollout", *SMALL, *flags, "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"cost model {path} was measured on cuda, but this rollout runs on cpu" in err
    assert len(err.strip().splitlines()) == 1


def test_simulate_on_a_profile(capsys):
    argv = [
        "simulate",
        "--preset",
        "DeepScaleR-7B",
        "--systems",
        "verl,auto",
        "--prompts",
        "4",
        "--group-size",
        "2",
        "--workers",
        "2",
        "--max-tokens",
        "512",
        "--median-tokens",
        "100",
        "--json",
        "--cost-model",
        str(Path(__file__).resolve().parents[1] / "profiles" / "policy.cost.json"),
    ]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["systems"]
    assert [row["system"] for row in rows] == ["verl", "auto"]
    assert all(row["makespan_seconds"] > 0 for row in rows)


@pytest.mark.parametrize(
    "argv",
    [
        [
            "simulate",
            "--preset",
            "DeepScaleR-7B",
            "--systems",
            "verl,seer",
            "--prompts",
            "8",
            "--workers",
            "2",
        ],
        ["models", "list"],
        ["--help"],
    ],
)
def test_commands_without_a_model_start_without_torch(argv):
    """In a fresh interpreter: the command runs, and neither torch nor transformers was imported."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys\nfrom specroll.cli import main\n"
        f"try:\n    code = main({argv!r})\nexcept SystemExit as exit:\n    code = exit.code\n"
        "print('loaded:', sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout


def test_bench_sets_workers_dispatches_side_by_side_with_the_simulators_prediction(capsys):
    systems = "workers:static,workers:context-aware,plain"
    assert (
        main(
            [
                "bench",
                *SMALL,
                "--workers",
                "2",
                "--worker-backend",
                "inline",
                "--systems",
                systems,
                "--chunk-tokens",
                "16",
                "--json",
            ]
        )
        == 0
    )
    static, aware, plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    # one round, the same tokens: the paired ratio is the makespans' inverse ratio
    assert aware["paired_vs_first"] == pytest.approx(static["makespan_seconds"] / aware["makespan_seconds"])
    assert static["output_tokens"] == aware["output_tokens"]  # exact mode: the same tokens under any dispatch
    for row in (static, aware):
        assert row["mean_acceptance_length"] == 1.0 and row["predicted_makespan_seconds"] > 0
        # scaled to the level plain measured: the forwards take `level` times the profile's time, the
        # report gaps are not scaled, so the replay moves from the profile's toward `level` times it,
        # never past it (5 % slack: admission's timing moves with the forwards' lengths)
        level = plain["makespan_seconds"] / plain["predicted_makespan_seconds"]
        ratio = row["scaled_makespan_seconds"] / row["predicted_makespan_seconds"]
        low, high = sorted((1.0, level))
        assert low * 0.95 <= ratio <= high * 1.05, (ratio, level)
        if abs(level - 1.0) > 0.1:  # the scale was applied: the replay moved, toward the level
            moved = (ratio - 1.0) / (level - 1.0)
            assert moved > 0.2, (ratio, level)
    assert main(["bench", *SMALL, "--systems", "workers:static"]) == 2
    assert "need --workers 2 or more" in capsys.readouterr().err


def test_bench_prices_cuda_graphs_and_overlap_against_eager_forwards(capsys):
    """With --cuda-graphs on (static shapes run eagerly on this CPU, each step launched before the
    previous is read back) against plain-serial (read back first) and plain-eager: the same tokens,
    so the same output; the same forwards but where overlap admits a queued request a step later;
    what differs is the time."""
    systems = "plain,plain-serial,plain-eager"
    assert main(["bench", *SMALL, "--cuda-graphs", "on", "--systems", systems, "--json"]) == 0
    overlapped, serial, eager = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["system"] for r in (overlapped, serial, eager)] == systems.split(",")
    assert overlapped["output_tokens"] == serial["output_tokens"] == eager["output_tokens"]
    assert serial["forward_passes"] == eager["forward_passes"]
    assert abs(overlapped["forward_passes"] - serial["forward_passes"]) <= 0.05 * serial["forward_passes"]
