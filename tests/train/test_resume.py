"""A stopped and resumed `specroll train` matches one that never stopped, step for step (weights and
rewards), and no run's files are overwritten unless --resume asks: on the bundled policy."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from specroll.cli import main
from specroll.train.checkpointing import latest_state_dir, load_state
from specroll.train.metrics_log import FILE_KEYS
from specroll.train.trainer import GRPOTrainer

ROOT = Path(__file__).resolve().parents[2]
FLAGS = [
    "--num-prompts",
    "4",
    "--n",
    "4",
    "--max-tokens",
    "64",
    "--lr",
    "1e-3",
    "--speculate",
    "suffix",
    "--kl-coef",
    "0.05",
]  # with a KL reference: the initial policy, not the resumed one
KEYS = ("step", "weights_sha256", "reward_mean", "output_tokens", "loss")


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _same(rows: list[dict]) -> list[tuple]:
    return [tuple(r[k] for k in KEYS) for r in rows]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory) -> Path:
    """`specroll train` stopped after 2 of its steps: its directory (never written to by the tests)."""
    out = tmp_path_factory.mktemp("stopped") / "run"
    assert main(["train", *FLAGS, "--steps", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def uninterrupted(stopped_run) -> list[dict]:
    """The same run's 4 steps, never stopped: its metrics as metrics.jsonl writes them."""
    config = replace(load_state(latest_state_dir(stopped_run)).config, steps=4)
    return [{FILE_KEYS.get(k, k): v for k, v in asdict(m).items()} for m in GRPOTrainer(config).run()]


def test_a_restored_trainer_goes_on_step_for_step(stopped_run, uninterrupted):
    state = load_state(latest_state_dir(stopped_run))
    assert state.next_step == 2
    trainer = GRPOTrainer(replace(state.config, steps=4))
    trainer.restore(state)
    resumed = trainer.run()
    assert _same(_rows(stopped_run)) == _same(uninterrupted[:2])
    assert [m.step for m in resumed] == [2, 3]
    assert [(m.step, m.weights_sha256, m.reward_mean, m.output_tokens, m.loss) for m in resumed] == _same(
        uninterrupted[2:]
    )
    assert uninterrupted[1]["weights_sha256"] != uninterrupted[3]["weights_sha256"]  # the weights moved
    engine_params = dict(trainer.engine.parts_for_testing().runner.model.named_parameters())
    for name, param in trainer.policy.named_parameters():
        assert torch.equal(engine_params[name], param.detach()), name  # the engine runs the trainer's weights
    assert resumed[0].accepted_per_draft.get("history", 0) > 0  # step 2 drafted from steps 0-1, replayed


def test_restore_refuses_another_config_or_initial_policy(stopped_run):
    state = load_state(latest_state_dir(stopped_run))
    trainer = GRPOTrainer(replace(state.config, micro_batch_size=2, steps=4))
    with pytest.raises(ValueError, match="micro_batch_size 8 -> 2"):
        trainer.restore(state)
    trainer = GRPOTrainer(replace(state.config, steps=4))
    with pytest.raises(ValueError, match="no longer holds the run's initial policy"):
        trainer.restore(replace(state, initial_weights_sha256="0" * 64))
    with pytest.raises(ValueError, match="do not match their recorded sha256"):
        trainer.restore(replace(state, weights_sha256="0" * 64))


def test_resume_refuses_flags_that_change_the_run_and_a_dir_without_a_state(stopped_run, tmp_path, capsys):
    before = (stopped_run / "metrics.jsonl").read_text()
    assert main(["train", "--resume", str(stopped_run), "--seed", "7", "--lr", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "lr 0.001 -> 0.5, seed 0 -> 7" in err and str(stopped_run) in err and len(err.splitlines()) == 1
    assert main(["train", "--resume", str(stopped_run), "--lr", "1e-5"]) == 2  # given, though the default
    assert "lr 0.001 -> 1e-05" in capsys.readouterr().err
    assert main(["train", "--resume", str(stopped_run), "--steps", "2"]) == 2
    assert "has done 2 steps" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no training state" in capsys.readouterr().err
    assert (stopped_run / "metrics.jsonl").read_text() == before


def test_a_new_run_refuses_a_directory_holding_one(stopped_run, capsys):
    files = {p.name: p.stat().st_mtime_ns for p in stopped_run.iterdir()}
    assert main(["train", *FLAGS, "--steps", "1", "--out", str(stopped_run)]) == 2
    err = capsys.readouterr().err
    assert f"{stopped_run} already holds a run" in err and f"--resume {stopped_run}" in err
    assert len(err.splitlines()) == 1
    assert {p.name: p.stat().st_mtime_ns for p in stopped_run.iterdir()} == files


def test_the_command_resumes_and_drops_the_lines_of_redone_steps(
    stopped_run, uninterrupted, tmp_path, capsys
):
    out = tmp_path / "run"
    shutil.copytree(stopped_run, out)
    with open(out / "metrics.jsonl", "a") as f:  # step 2 was logged, then the run died before its state
        f.write(json.dumps({**uninterrupted[2], "reward_mean": -1.0}) + "\n")
    assert main(["train", "--resume", str(out), "--steps", "3", "--save-every", "1"]) == 0
    assert "resuming" in capsys.readouterr().out
    assert _same(_rows(out)) == _same(uninterrupted[:3])
    assert [p.name for p in (out / "train_state").iterdir()] == ["step-000003"]


@pytest.mark.slow
def test_a_killed_run_resumed_matches_one_never_stopped(tmp_path, uninterrupted):
    """A real kill: SIGKILL once the state after step 2 is on disk, mid-run; then `--resume`."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "specroll.cli", "train", *FLAGS, "--steps", "4", "--save-every", "2"]
    process = subprocess.Popen(
        [*command, "--out", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while not (out / "train_state" / "step-000002").is_dir() and process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL  # killed, not finished
    assert not (out / "checkpoint").exists()
    resumed = subprocess.run(
        [sys.executable, "-m", "specroll.cli", "train", "--resume", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout and "at step 2 of 4" in resumed.stdout
    assert _same(_rows(out)) == _same(uninterrupted)
