"""Loads a Hugging Face checkpoint directory: config.json plus safetensors weights (single file or a
sharded index). Pickled weights (.bin, .pt, .pth, .ckpt) are refused: loading them runs arbitrary code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch.overrides import TorchFunctionMode

from specroll.model.config import ModelConfig
from specroll.model.transformer import CausalLM

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
SHARD_INDEX = "model.safetensors.index.json"


def read_config(model_dir: str | Path) -> ModelConfig:
    path = _checkpoint_dir(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {model_dir} has no config.json")
    try:
        hf = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"checkpoint {model_dir}: config.json is not valid JSON ({err})") from None
    hf["eos_token_id"] = _merged_eos(hf.get("eos_token_id"), _generation_eos(path.parent))
    return ModelConfig.from_hf(hf)


def load_model(
    model_dir: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    config: ModelConfig | None = None,
) -> CausalLM:
    """Build the model from `model_dir` and load its weights, checking every name and shape; `config`:
    the checkpoint's, where the caller read it already (else it is read here)."""
    config = config or read_config(model_dir)
    state = load_state_dict(model_dir)
    with _RandomInitSkipped():  # every parameter is then loaded (`_check_state`)
        model = CausalLM(config)
    _check_state(model, state, model_dir)
    model.load_state_dict(state, strict=False)
    return model.to(device=device, dtype=dtype).eval()


def load_state_dict(model_dir: str | Path) -> dict[str, torch.Tensor]:
    root = _checkpoint_dir(model_dir)
    files = _weight_files(root)
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(str(file)))
        except (SafetensorError, OSError, ValueError) as err:
            raise ValueError(f"checkpoint {model_dir}: cannot read {file.name} ({err})") from None
    return state


def _checkpoint_dir(model_dir: str | Path) -> Path:
    root = Path(model_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"checkpoint directory {model_dir} does not exist")
    return root


def _weight_files(root: Path) -> list[Path]:
    index = root / SHARD_INDEX
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (root / s).is_file()]
        if missing:
            raise FileNotFoundError(
                f"checkpoint {root}: shards named in {SHARD_INDEX} are missing: {missing}"
            )
        return [root / s for s in shards]
    files = sorted(root.glob("*.safetensors"))
    if files:
        return files
    pickled = [p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES]
    if pickled:
        raise ValueError(
            f"checkpoint {root} holds only pickled weights ({', '.join(pickled)}); specroll loads "
            "safetensors only, since unpickling can run arbitrary code. Convert with "
            "`model.save_pretrained(dir, safe_serialization=True)`."
        )
    raise FileNotFoundError(f"checkpoint {root} has no *.safetensors weights")


class _RandomInitSkipped(TorchFunctionMode):
    """Parameters made without their random initialisation (SmolLM2's 211 layers took 1.7 s of a
    2.4 s load drawing numbers the checkpoint then overwrote). A mode is this thread's alone."""

    SKIPPED = frozenset({"uniform_", "normal_", "kaiming_uniform_", "trunc_normal_"})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in self.SKIPPED:
            return args[0] if args else kwargs["tensor"]  # the tensor, as it is
        return func(*args, **kwargs)


def _check_state(model: CausalLM, state: dict[str, torch.Tensor], model_dir: str | Path) -> None:
    expected = {name: p.shape for name, p in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
        state.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(state))
    if missing:
        raise ValueError(
            f"checkpoint {model_dir} lacks weights: {missing[:5]}{' ...' if len(missing) > 5 else ''}"
        )
    for name, shape in expected.items():
        if tuple(state[name].shape) != tuple(shape):
            raise ValueError(
                f"checkpoint {model_dir}: weight {name} has shape {tuple(state[name].shape)}, "
                f"config.json implies {tuple(shape)}"
            )


def _merged_eos(*values) -> list[int]:
    ids: list[int] = []
    for value in values:
        for token in [value] if isinstance(value, int) else (value or []):
            if token not in ids:
                ids.append(int(token))
    return ids


def _generation_eos(root: Path):
    path = root / "generation_config.json"
    if path.is_file():
        try:
            return json.loads(path.read_text()).get("eos_token_id")
        except json.JSONDecodeError:
            return None
    return None
