"""The profile path on a tiny random checkpoint and a grid small enough to take seconds."""

import json

import torch

from specroll.cli import main
from specroll.commands.profile import default_output
from specroll.policies.cost_model import CostModel
from specroll.policies.profile_grid import fit_on_grid
from specroll.profiling import ProfileGrid, build_runner, forward_timer


def test_standard_grid():
    grid = ProfileGrid.standard(max_batch_size=12, max_draft=8, context_lengths=(64,))
    assert grid.batch_sizes == (1, 2, 4, 8, 12)
    assert grid.tokens_per_sequence == (1, 2, 3, 5, 9)
    assert grid.capacity == 73


def test_quick_grid():
    grid = ProfileGrid.quick(max_batch_size=20, max_draft=6, max_context=300)
    assert grid.batch_sizes == (1, 4, 16, 20)
    assert grid.tokens_per_sequence == (1, 2, 7)
    assert grid.context_lengths == (0, 64, 300)
    assert (grid.warmup, grid.repeats) == (1, 2)
    assert ProfileGrid.quick(1, 0, 30) == ProfileGrid((1,), (1,), (0, 15, 30), repeats=2, warmup=1)
    small = ProfileGrid.quick(max_batch_size=1, max_draft=1, max_context=10)
    assert len(small.tokens_per_sequence) * len(small.context_lengths) >= 5  # enough points to fit


def test_a_profile_times_every_point_of_the_grid(qwen2_dir):
    grid = ProfileGrid((1, 2), (1, 3), (0, 8), repeats=1, warmup=0)
    _, samples = fit_on_grid(grid, forward_timer(build_runner(qwen2_dir, grid), grid))
    assert [(s.batch_size, s.num_tokens, s.context_length) for s in samples] == [
        (1, 1, 0),
        (1, 3, 0),
        (2, 1, 0),
        (2, 3, 0),
        (1, 1, 8),
        (1, 3, 8),
        (2, 1, 8),
        (2, 3, 8),
    ]
    assert all(s.seconds > 0 for s in samples)


def test_profile_command_writes_a_loadable_fit(qwen2_dir, tmp_path, capsys):
    out = tmp_path / "tiny.cost.json"
    code = main(
        [
            "profile",
            "--model",
            str(qwen2_dir),
            "--draft-model",
            str(qwen2_dir),
            "--max-batch-size",
            "2",
            "--max-draft",
            "2",
            "--context-lengths",
            "4,16",
            "--repeats",
            "1",
            "--cuda-graphs",
            "on",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    model = CostModel.load(out)
    assert model.fit_error is not None and model.c_base + model.c_tok > 0
    assert json.loads(out.read_text())["device"] == "cpu"  # where it was measured, written down
    assert "cuda-graphs" in model.source  # the target timed at static shapes, as the engine runs them
    assert model.source.endswith(f", {torch.get_num_threads()} threads")  # CPU timings depend on them
    printed = capsys.readouterr().out
    assert "mean relative error" in printed and "D(b)" in printed


def test_default_output_is_named_after_the_checkpoint(tmp_path):
    assert str(default_output(tmp_path / "policy")) == "profiles/policy.cost.json"
