"""Model configuration read from a Hugging Face `config.json` (Qwen2/Qwen2.5, Qwen3, Llama 3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SUPPORTED_ARCHITECTURES = ("qwen2", "qwen3", "llama")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_max_position_embeddings: int = 8192  # llama3 only

    def __post_init__(self) -> None:
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"unsupported rope type {self.rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
            )
        if self.theta <= 0 or self.factor <= 0:
            raise ValueError(f"rope theta and factor must be positive, got {self.theta}, {self.factor}")


@dataclass(frozen=True)
class ModelConfig:
    architecture: str  # one of SUPPORTED_ARCHITECTURES
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    has_qkv_bias: bool = False  # Qwen2 always; Llama when attention_bias
    has_qk_norm: bool = False  # Qwen3
    rope: RopeConfig = field(default_factory=RopeConfig)
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported architecture {self.architecture!r}; "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        positive = "vocab_size hidden_size intermediate_size num_layers num_heads num_kv_heads head_dim"
        for name in [*positive.split(), "max_position_embeddings"]:
            if getattr(self, name) <= 0:
                raise ValueError(f"config {name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_kv_heads})"
            )

    @property
    def num_layer_parameters(self) -> int:
        """About how many weights the decoder layers hold (attention at four hidden x hidden
        products, the MLP at three): what a decode step reads, embeddings aside."""
        return self.num_layers * (4 * self.hidden_size**2 + 3 * self.hidden_size * self.intermediate_size)

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "ModelConfig":
        """Build from the parsed contents of a Hugging Face `config.json`."""
        arch = hf.get("model_type")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"unsupported model_type {arch!r} in config.json; "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        try:
            num_heads = int(hf["num_attention_heads"])
            hidden = int(hf["hidden_size"])
            return cls(
                architecture=arch,
                vocab_size=int(hf["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(hf["intermediate_size"]),
                num_layers=int(hf["num_hidden_layers"]),
                num_heads=num_heads,
                num_kv_heads=int(hf.get("num_key_value_heads") or num_heads),
                head_dim=int(hf.get("head_dim") or hidden // num_heads),
                max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
                rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
                tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
                has_qkv_bias=arch == "qwen2" or bool(hf.get("attention_bias", False)),
                has_qk_norm=arch == "qwen3",
                rope=_rope_from_hf(hf),
                eos_token_ids=_as_ids(hf.get("eos_token_id")),
            )
        except KeyError as err:
            raise ValueError(f"config.json lacks the field {err.args[0]!r}") from None


def _rope_from_hf(hf: dict[str, Any]) -> RopeConfig:
    # transformers 5 writes `rope_parameters`; older checkpoints write `rope_theta` + `rope_scaling`.
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    return RopeConfig(
        theta=theta,
        rope_type=rope_type,
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(params.get("original_max_position_embeddings", 8192)),
    )


def _as_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)
