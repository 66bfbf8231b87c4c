"""Tiny randomly initialised Hugging Face checkpoints of each supported architecture, saved to disk."""

from __future__ import annotations

import torch
import transformers

COMMON = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    eos_token_id=1,
)

ARCHITECTURES = {
    "qwen2": lambda: transformers.Qwen2Config(**COMMON, tie_word_embeddings=False),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=32, tie_word_embeddings=True),
    "llama": lambda: transformers.LlamaConfig(
        **COMMON,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
}


def save_tiny_checkpoint(arch: str, directory, logit_scale: float = 1.0) -> transformers.PreTrainedModel:
    """A seeded random model; `logit_scale` sharpens its output distribution (scales lm_head)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(ARCHITECTURES[arch]()).eval()
    with torch.no_grad():  # random, non-trivial biases and norm weights exercise every parameter
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(torch.randn_like(param) * 0.1)
        if not model.config.tie_word_embeddings:
            model.lm_head.weight.mul_(logit_scale)
    model.save_pretrained(directory, safe_serialization=True)
    return model
