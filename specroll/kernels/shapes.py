"""The model shapes the kernels are compiled, predicted and measured at: SmolLM2-135M (the bundled
model) and a 7B-class model (Qwen2-7B's: the issue's 3584 -> 18944). Plain numbers, no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    intermediate: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab: int
    num_layers: int
    has_qkv_bias: bool

    def linear_layers(self) -> dict[str, tuple[int, int]]:
        """A decoder layer's projections, name -> (K, N) (q, k, v; o; gate, up; down)."""
        q, kv, H, I = (
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
            self.hidden,
            self.intermediate,
        )
        return {
            "q": (H, q),
            "k": (H, kv),
            "v": (H, kv),
            "o": (q, H),
            "gate": (H, I),
            "up": (H, I),
            "down": (I, H),
        }

    @property
    def lm_head(self) -> tuple[int, int]:
        return self.hidden, self.vocab

    @property
    def group(self) -> int:
        """Query heads a key head serves."""
        return self.num_heads // self.num_kv_heads

    def num_weights(self) -> int:
        """The weights a forward reads: every layer's projections and the LM head (norms aside)."""
        per_layer = sum(K * N for K, N in self.linear_layers().values())
        return self.num_layers * per_layer + self.hidden * self.vocab


SMOLLM2 = ModelShape("SmolLM2-135M", 576, 1536, 9, 3, 64, 49152, 30, False)
QWEN2_7B = ModelShape("Qwen2-7B", 3584, 18944, 28, 4, 128, 152064, 28, True)
SHAPES = (SMOLLM2, QWEN2_7B)
