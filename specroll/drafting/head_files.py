"""A saved draft head on disk, read without torch: `config.json` (format `FORMAT`) beside
`model.safetensors`, so that choosing a drafter never loads a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "specroll-draft-head"
HEAD_DIR_NAME = "draft-head"  # where `specroll head train` saves a checkpoint's head by default
TRAINING_DATA_FILE = "training-data.provenance.json"  # `specroll.provenance` of the rollout it learned from


def read_head_config(directory: str | Path | None) -> dict[str, Any] | None:
    """The saved head's config fields, or None where `directory` holds no head."""
    if directory is None:
        return None
    try:
        fields = json.loads((Path(directory) / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return fields if isinstance(fields, dict) and fields.get("format") == FORMAT else None


def head_matches(directory: str | Path | None, target) -> bool:
    """A head is saved in `directory` for the target's hidden size and vocabulary (a `ModelConfig`)."""
    fields = read_head_config(directory)
    return fields is not None and (fields.get("hidden_size"), fields.get("vocab_size")) == (
        target.hidden_size,
        target.vocab_size,
    )
