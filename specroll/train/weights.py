"""A policy's weights: their fingerprint, and the checkpoint `--model` loads back."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Mapping

import torch
from safetensors.torch import save_file

_WEIGHT_SUFFIXES = (  # files that hold weights, not carried over from the source checkpoint
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".safetensors.index.json",
    ".bin.index.json",
)


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


def save_checkpoint(model: torch.nn.Module, source_dir: str | Path, out_dir: str | Path) -> Path:
    """The trained model as Hugging Face's layout: model.safetensors (`unique_tensors`) beside the
    source checkpoint's config, generation config and tokenizer files; `--model` loads it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(unique_tensors(model.state_dict()), out / "model.safetensors", metadata={"format": "pt"})
    for path in source_files(source_dir):
        shutil.copy2(path, out / path.name)
    return out


def source_files(source_dir: str | Path) -> list[Path]:
    """The source checkpoint's files other than its weights (config, tokenizer), which new weights
    keep beside them so that `--model` loads the folder."""
    return [p for p in Path(source_dir).iterdir() if p.is_file() and not p.name.endswith(_WEIGHT_SUFFIXES)]


def unique_tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with tied tensors once, under their first name (as `save_pretrained` writes them)."""
    seen: set[tuple] = set()
    unique = {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if tensor.numel() == 0 or key not in seen:
            seen.add(key)
            unique[name] = tensor.detach().contiguous()
    return unique
