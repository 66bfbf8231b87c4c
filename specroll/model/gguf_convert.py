"""A GGUF checkpoint dequantized by `transformers` into a checkpoint directory specroll's loader reads.

The directory gets config.json (the quantization entry dropped: the weights are plain fp32 now),
model.safetensors (a tied lm_head is left out, as `save_pretrained` does), generation_config.json
and the tokenizer with its chat template. `transformers` reads GGUF only with the `gguf` package
installed (and `accelerate` for its loading path): the `models` extra.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REQUIRED_PACKAGES = ("gguf", "accelerate")
DROPPED_CONFIG_KEYS = ("quantization_config", "_model_name_or_path", "_name_or_path")  # and temp paths


class MissingDependencyError(RuntimeError):
    pass


def check_dependencies() -> None:
    missing = [name for name in REQUIRED_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(
            f"converting a GGUF model needs {', '.join(missing)}: pip install 'specroll[models]'"
        )


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Write the dequantized checkpoint of `gguf_path` into `out_dir` (which must exist)."""
    check_dependencies()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = dict(pretrained_model_name_or_path=str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer = AutoTokenizer.from_pretrained(**source)
    if not tokenizer.chat_template:
        raise ValueError(f"{gguf_path.name} carries no chat template")
    model = AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32)
    _write_weights(model, out_dir / "model.safetensors")
    _write_config(model, out_dir / "config.json")
    _write_generation_config(model, out_dir)
    tokenizer.save_pretrained(str(out_dir))


def _write_weights(model, path: Path) -> None:
    from safetensors.torch import save_file

    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # the same tensor as the input embedding
    save_file(
        {name: t.detach().contiguous() for name, t in state.items()}, str(path), metadata={"format": "pt"}
    )


def _write_config(model, path: Path) -> None:
    config = model.config.to_diff_dict()  # only what differs from the architecture's defaults
    for key in DROPPED_CONFIG_KEYS:
        config.pop(key, None)
    config["architectures"] = [type(model).__name__]
    config["dtype"] = "float32"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _write_generation_config(model, out_dir: Path) -> None:
    if model.generation_config.eos_token_id is None:
        model.generation_config.eos_token_id = model.config.eos_token_id
    if model.generation_config.eos_token_id is None:
        raise ValueError("the GGUF names no end-of-sequence token")
    model.generation_config.save_pretrained(str(out_dir))
