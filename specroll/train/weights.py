"""A policy's weights: their fingerprint, and the checkpoint `--model` loads back."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Mapping

import torch

_WEIGHT_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json")


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 over every tensor of the model's state dict (`state_sha256`)."""
    return state_sha256(model.state_dict())


def state_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 over every tensor of a state dict, in name order (names, shapes, dtypes and bytes)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(data.shape)}:{data.dtype}".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()


def save_checkpoint(model, source_dir: str | Path, out_dir: str | Path) -> Path:
    """The trained model as safetensors with its config, plus the source checkpoint's tokenizer files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for path in Path(source_dir).iterdir():
        if path.is_file() and path.name not in _WEIGHT_FILES and not path.name.endswith(".safetensors"):
            shutil.copy2(path, out / path.name)
    return out
