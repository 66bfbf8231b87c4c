"""What `head train` and `head eval` tell a user while and after they run (on the bundled policy):
eval at the threads it is given with a progress line per response, and a training that says which of
its two limits, --minutes or --max-epochs, ended it."""

from __future__ import annotations

import io
import threading

import pytest
import torch

from specroll.cli import main
from specroll.commands.progress import INTERVAL_ENV, ProgressLines
from specroll.drafting.head_files import TRAINING_DATA_FILE
from specroll.provenance import provenance_path

WORKLOAD = ["--num-prompts", "2", "--n", "2", "--max-tokens", "24", "--seed", "3"]
TRAIN = ["--draft-vocab", "32", "--no-progress"]


@pytest.fixture
def rollout(tmp_path):
    path = tmp_path / "rollout.jsonl"
    assert main(["rollout", *WORKLOAD, "--speculate", "off", "--out", str(path), "--no-progress"]) == 0
    return path


@pytest.fixture
def head(rollout, tmp_path):
    path = tmp_path / "head"
    flags = ["--rollouts", str(rollout), "--out", str(path), "--minutes", "0.02", *TRAIN]
    assert main(["head", "train", *WORKLOAD, *flags]) == 0
    return path


def test_head_eval_runs_at_the_given_threads_and_reports_every_response(rollout, head, capsys, monkeypatch):
    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.setenv(INTERVAL_ENV, "0")  # a line at every call, as every 30 s on a slow machine
    capsys.readouterr()
    flags = ["--rollouts", str(rollout), "--draft-head", str(head), "--threads", "1", "--depth", "2"]
    assert main(["head", "eval", *WORKLOAD, *flags]) == 0
    assert threads == [1]
    err = capsys.readouterr().err.splitlines()
    features = [line.split(",")[0] for line in err if line.startswith("features: ")]
    assert features[0] == "features: 0/4 responses" and features[-1] == "features: 4/4 responses"
    rates = [line.split()[2].split("/") for line in err if line.startswith("coupling rates: ")]
    done = [int(d) for d, _ in rates]
    total = int(rates[0][1])  # drafts measured: each response's positions, at depths 1 and 2
    assert done[0] == 0 and done[-1] == total and len(done) == 1 + 4 * 2  # a line per response and depth
    assert done == sorted(done)


def test_head_eval_takes_the_older_head_flag_and_lists_one(rollout, head, capsys):
    assert main(["head", "eval", *WORKLOAD, "--rollouts", str(rollout), "--head", str(head)]) == 0
    assert "| depth | positions |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["head", "eval", "--help"])
    usage = capsys.readouterr().out
    assert "--draft-head" in usage and "--head " not in usage and "--head\n" not in usage


def test_head_train_says_which_limit_ended_it(rollout, tmp_path, capsys):
    base = ["head", "train", *WORKLOAD, "--rollouts", str(rollout), *TRAIN]
    assert main([*base, "--out", str(tmp_path / "a"), "--minutes", "5", "--max-epochs", "1"]) == 0
    out = capsys.readouterr().out
    assert "(1.00 epochs over" in out and "ended by --max-epochs 1, before --minutes 5 ran out" in out
    recorded = (tmp_path / "a" / TRAINING_DATA_FILE).read_text()  # for `specroll models list`
    assert recorded == provenance_path(rollout).read_text()
    assert main([*base, "--out", str(tmp_path / "b"), "--minutes", "0.01", "--max-epochs", "100000"]) == 0
    assert "ended by --minutes 0.01; saved" in capsys.readouterr().out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_line_left_open_on_a_terminal_is_ended_by_close():
    stream = _Terminal()
    progress = ProgressLines("training", "s of the budget", stream=stream, interval=0)
    progress(5, 60, "epoch 20.0 of at most 20")  # the epochs ended it before the minutes
    progress.close()
    progress.close()  # once
    assert stream.getvalue() == "\rtraining: 5/60 s of the budget, 0 s, epoch 20.0 of at most 20\n"


class _Lines(io.StringIO):
    """A stream that signals every line written to it, so a test waits for lines, not for time."""

    def __init__(self) -> None:
        super().__init__()
        self.lines = threading.Semaphore(0)

    def write(self, text: str) -> int:
        written = super().write(text)
        for _ in range(text.count("\n")):
            self.lines.release()
        return written


def test_kept_alive_repeats_the_last_line_while_a_long_unit_of_work_runs():
    stream = _Lines()
    progress = ProgressLines("coupling rates", "drafts measured", stream=stream, interval=0.05)
    with progress.kept_alive():
        progress(0, 256)
        for _ in range(4):  # the first line, then repeats while one chunk of work has not returned
            assert stream.lines.acquire(timeout=30)
        progress(256, 256)
    lines = [line.split(",")[0] for line in stream.getvalue().splitlines()]
    assert lines[0] == lines[1] == "coupling rates: 0/256 drafts measured" and len(lines) >= 5
    assert lines[-1] == "coupling rates: 256/256 drafts measured" and lines.count(lines[-1]) == 1


def test_progress_lines_follow_the_interval_on_a_given_clock():
    now = [0.0]
    stream = io.StringIO()
    progress = ProgressLines("eval", "responses", stream=stream, interval=30, clock=lambda: now[0])
    for done, at in ((1, 1.0), (2, 29.0), (3, 32.0), (4, 40.0), (5, 63.0)):
        now[0] = at
        progress(done, 6)
    lines = [line.split(",")[0] for line in stream.getvalue().splitlines()]
    assert lines == ["eval: 1/6 responses", "eval: 3/6 responses", "eval: 5/6 responses"]
