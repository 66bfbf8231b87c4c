"""Catalog names and `--model` resolution: directories as they are, pulled names to their cache
directory, clear errors for names not pulled and for neither. Fast: no model is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from specroll.model.catalog import (
    CATALOG,
    MANIFEST_FILE,
    SPECROLL_HOME_ENV,
    ModelManifest,
    model_cache_dir,
    pulled_manifest,
    resolve_model_dir,
    specroll_home,
)


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(SPECROLL_HOME_ENV, str(tmp_path / "home"))
    return tmp_path / "home"


def fake_pull(name: str = "smollm2") -> Path:
    """A cache directory with a finished pull's manifest (no weights: resolution never reads them)."""
    directory = model_cache_dir(name)
    directory.mkdir(parents=True)
    entry = CATALOG[name]
    ModelManifest(name, "test", entry.gguf_file, entry.gguf_sha256, "transformers test").write(directory)
    return directory


def test_home_defaults_to_the_user_cache_and_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(SPECROLL_HOME_ENV, raising=False)
    assert specroll_home() == Path.home() / ".cache" / "specroll"
    monkeypatch.setenv(SPECROLL_HOME_ENV, str(tmp_path))
    assert model_cache_dir("smollm2") == tmp_path / "models" / "smollm2"


def test_an_existing_directory_is_returned_as_is(home, tmp_path):
    assert resolve_model_dir(tmp_path) == tmp_path
    assert resolve_model_dir(str(tmp_path)) == tmp_path


def test_a_pulled_name_resolves_to_its_cache_directory(home):
    directory = fake_pull()
    assert resolve_model_dir("smollm2") == directory == home / "models" / "smollm2"


def test_a_name_not_pulled_says_how_to_pull_it(home):
    with pytest.raises(FileNotFoundError, match="specroll models pull smollm2"):
        resolve_model_dir("smollm2")


@pytest.mark.parametrize("manifest", [None, "{not json", '{"name": "other"}'])
def test_a_directory_without_a_valid_manifest_is_not_pulled(home, manifest):
    directory = model_cache_dir("smollm2")
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")  # an interrupted pull's leftovers
    if manifest is not None:
        (directory / MANIFEST_FILE).write_text(manifest)
    assert pulled_manifest("smollm2") is None
    with pytest.raises(FileNotFoundError, match="not pulled"):
        resolve_model_dir("smollm2")


def test_an_unknown_name_lists_the_known_ones(home, tmp_path):
    for value in ("gpt-17", tmp_path / "missing"):
        with pytest.raises(FileNotFoundError, match="known models: smollm2"):
            resolve_model_dir(value)


def test_manifest_round_trips(tmp_path):
    manifest = ModelManifest("smollm2", "a.whl", "m.gguf", "ab" * 32, "transformers 5")
    manifest.write(tmp_path)
    assert ModelManifest.read(tmp_path) == manifest
