"""`scripts/gpu_weights.py` on a local folder, as CI runs it: a tiny checkpoint and a draft head packed
into several pieces, each staged alone and received as one call to a GPU machine would carry it,
reassembled elsewhere and loaded by specroll in bfloat16 with the logits of the source's bf16 load;
a missing or corrupt piece is refused by name."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specroll.model.loader import load_model
from specroll.model.runner import ModelRunner, SequenceInput
from tests.tiny_checkpoints import save_tiny_checkpoint

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_weights.py"
PIECE_MIB = 0.05  # ~52 KB: the tiny checkpoint (~200 KB in bf16) goes in several pieces


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("gpu_weights", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_weights"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def packed(tmp_path, script):
    """A tiny Llama with a stand-in head directory, packed; the work folder and the source."""
    source = tmp_path / "source"
    save_tiny_checkpoint("llama", source)
    (source / "draft-head").mkdir()
    (source / "draft-head" / "config.json").write_text('{"format": "specroll-draft-head"}\n')
    (source / "draft-head" / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    work = tmp_path / "work"
    args = ["--pack", "--model", str(source), "--piece-mib", str(PIECE_MIB), "--work", str(work)]
    assert script.main(args) == 0
    return work, source


def _carry_every_piece(script, work: Path, count: int) -> None:
    for index in range(count):
        assert script.main(["--piece", str(index), "--work", str(work)]) == 0
        assert len(list((work / "outgoing").glob("piece-*.bin"))) == 1  # one piece a call
        script.receive(work)


def test_pieces_reassemble_to_a_checkpoint_with_the_sources_bf16_logits(packed, script, tmp_path):
    work, source = packed
    manifest = script.read_manifest(work / "pieces")
    count = len(manifest["pieces"])
    assert count >= 3 and all(p["bytes"] <= PIECE_MIB * 2**20 for p in manifest["pieces"])
    assert "specroll-manifest.json" not in {f["path"] for f in manifest["files"]}
    _carry_every_piece(script, work, count)
    out = tmp_path / "assembled"
    assert script.main(["--assemble", str(out), "--work", str(work)]) == 0
    assert (out / "draft-head" / "model.safetensors").read_bytes() == bytes(range(256)) * 40
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        assert {weights.get_tensor(k).dtype for k in weights.keys()} == {torch.bfloat16}
    assert torch.equal(_logits(out), _logits(source))


def _logits(model_dir: Path) -> torch.Tensor:
    """Every position's logits of one prompt, the model loaded in bfloat16."""
    runner = ModelRunner(load_model(model_dir, dtype=torch.bfloat16), 1, 64)
    tokens = [3, 14, 15, 92, 65, 35]
    return runner.forward([SequenceInput(0, 0, tokens, num_logits=len(tokens))]).logits


def test_a_flipped_byte_or_a_missing_piece_is_refused_by_name(packed, script, tmp_path, capsys):
    work, _ = packed
    count = len(script.read_manifest(work / "pieces")["pieces"])
    _carry_every_piece(script, work, count)
    piece = work / "received" / "piece-01.bin"
    data = bytearray(piece.read_bytes())
    data[100] ^= 0x01
    piece.write_bytes(bytes(data))
    out = tmp_path / "assembled"
    assert script.main(["--assemble", str(out), "--work", str(work)]) == 1
    assert f"piece 1 of {count} (piece-01.bin) is corrupt" in capsys.readouterr().err
    assert not out.exists()  # nothing half-built is left where a loader would take it
    piece.unlink()
    assert script.receive(work) == ["piece-01.bin"]
    assert script.main(["--assemble", str(out), "--work", str(work)]) == 1
    assert f"piece 1 of {count} (piece-01.bin) is missing" in capsys.readouterr().err


def test_a_piece_the_manifest_does_not_list_is_refused(packed, script):
    work, _ = packed
    count = len(script.read_manifest(work / "pieces")["pieces"])
    with pytest.raises(script.TransferError, match=f"no piece {count}"):
        script.stage(work, count)


def test_the_gpu_checks_parts_run_on_weights_assembled_where_part_model_builds(script, tmp_path):
    """The documented sequence, in smoke sizes: SmolLM2's smoke shape packed, carried piece by piece,
    assembled into the check's model directory; the check then runs on it without building one."""
    check = _gpu_check()
    source, work = tmp_path / "source", tmp_path / "work"
    check.build_model(source, "cpu", check.SMOKE.shape)
    assert script.main(["--pack", "--model", str(source), "--piece-mib", "3", "--work", str(work / "w")]) == 0
    _carry_every_piece(script, work / "w", len(script.read_manifest(work / "w" / "pieces")["pieces"]))
    assert script.main(["--assemble", str(work / "smollm2-shape"), "--work", str(work / "w")]) == 0
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "SPECROLL_HOME": str(tmp_path / "home"), "PARTS": "trace"}
    command = [sys.executable, str(check.__file__), "--smoke", "--work", str(work)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = (out / "summary.txt").read_text().splitlines()[1:]
    assert [row.split()[:2] for row in rows] == [["trace", "passed"]]  # no part `model`: nothing rebuilt


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT.parent / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module
