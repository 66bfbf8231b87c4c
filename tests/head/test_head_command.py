"""`specroll head train`, `head eval` and `head replay` on the bundled policy, and `--speculate on`
picking the head."""

from __future__ import annotations

import json

from specroll.cli import build_parser, main
from specroll.commands.rollout import config_from_args
from specroll.provenance import RolloutProvenance
from specroll.drafting.head_files import read_head_config
from specroll.rollout import RolloutConfig

WORKLOAD = ["--num-prompts", "4", "--n", "4", "--max-tokens", "48", "--seed", "3"]


def test_head_train_then_eval_then_rollout_with_it(tmp_path, capsys):
    rollout = tmp_path / "rollout.jsonl"
    assert main(["rollout", *WORKLOAD, "--speculate", "off", "--out", str(rollout), "--no-progress"]) == 0
    head = tmp_path / "head"
    flags = ["--rollouts", str(rollout), "--minutes", "0.05", "--out", str(head), "--no-progress"]
    assert (
        main(
            [
                "head",
                "train",
                *WORKLOAD,
                *flags,
                "--draft-vocab",
                "64",
                "--num-blocks",
                "1",
                "--exclude-seed",
                "0",
                "--exclude-prompts",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "held out: loss" in out and "saved" in out
    assert (
        "--exclude-seed 0 (--exclude-prompts 1) draws 1 problems, 1 of them among this rollout's 4: "
        "left out; 12 responses remain" in out
    )
    # the depth is the CPU's default (one draft); the two given fields replace the default's
    assert "head shape: 1 deep, 1 block, 64-token draft vocabulary (for drafting on cpu)" in out
    assert read_head_config(head)["draft_vocab_size"] == 64
    assert read_head_config(head)["num_blocks"] == 1
    assert read_head_config(head)["train_depth"] == 1
    assert main(["head", "eval", *WORKLOAD, "--rollouts", str(rollout), "--head", str(head)]) == 0
    table = capsys.readouterr().out
    assert "| depth | positions | argmax | inverse-cdf" in table and table.count("\n| ") >= 3
    again = ["head", "replay", *WORKLOAD, "--rollouts", str(rollout), "--head", str(head)]
    assert main([*again, "--chains", "1,2", "--trees", "4"]) == 0
    replayed = capsys.readouterr().out
    assert "| chain | 1 |" in replayed and "| chain | 2 |" in replayed and "| tree | 4 |" in replayed
    assert main([*again, "--trees", "4,0"]) == 2
    assert "--trees budgets must be >= 1" in capsys.readouterr().err

    config = RolloutConfig(draft_head_dir=head)
    assert config.has_head and config.drafter_name == "draft-head"  # `on` prefers a trained head
    spec_out = tmp_path / "spec.jsonl"
    assert (
        main(["rollout", *WORKLOAD, "--draft-head", str(head), "--out", str(spec_out), "--no-progress"]) == 0
    )
    plain = [json.loads(line)["token_ids"] for line in rollout.read_text().splitlines()]
    spec = [json.loads(line)["token_ids"] for line in spec_out.read_text().splitlines()]
    assert plain == spec

    systems = f"plain,speculative:fixed-1/draft-head@{head}"  # a head named in the system, not the config
    assert main(["bench", *WORKLOAD, "--systems", systems, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["system"] for r in rows] == systems.split(",")
    assert rows[0]["output_tokens"] == rows[1]["output_tokens"] and rows[1]["mean_acceptance_length"] > 1


def test_head_train_names_a_rollout_from_another_workload(tmp_path, capsys):
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_text(json.dumps({"prompt_id": 999999, "token_ids": [1, 2, 3]}) + "\n")
    RolloutProvenance.of(
        config_from_args(build_parser("head").parse_args(["head", "train", *WORKLOAD]))
    ).write_beside(rollout)
    code = main(["head", "train", *WORKLOAD, "--rollouts", str(rollout), "--out", str(tmp_path / "h")])
    assert code == 2
    assert "prompt_id 999999 is not among this workload's problems" in capsys.readouterr().err


def test_head_train_refuses_a_shape_before_any_rollout(tmp_path, capsys, monkeypatch):
    from specroll.commands import head as command

    def no_rollout(*_):
        raise AssertionError("the rollout ran before the shape was checked")

    monkeypatch.setattr(command, "_run_rollout", no_rollout)
    out = str(tmp_path / "h")
    assert main(["head", "train", *WORKLOAD, "--num-blocks", "0", "--out", out]) == 2
    assert "num_blocks >= 1" in capsys.readouterr().err
    assert main(["head", "train", *WORKLOAD, "--depth", "0", "--out", out]) == 2
    assert "need depth >= 1" in capsys.readouterr().err


def test_head_train_defaults_to_a_workload_that_trains_a_head_in_minutes():
    """192 responses of up to 256 tokens and 5 minutes: on SmolLM2 GSM8K the whole command took 4.9
    minutes on 2 cores (BENCHMARKS.md); the rollout's own defaults (64 x 8 x 512) would take an hour."""
    args = build_parser("head").parse_args(["head", "train", "--model", "smollm2"])
    assert (args.num_prompts, args.n, args.max_tokens, args.max_batch_size) == (48, 4, 256, 128)
    assert args.minutes == 5.0
    rollout = build_parser("rollout").parse_args(["rollout"])
    assert (rollout.num_prompts, rollout.n) == (64, 8)  # the rollout keeps its own
