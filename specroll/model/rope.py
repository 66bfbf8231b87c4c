"""Rotary position embeddings (Su et al. 2021), with linear and Llama 3 frequency scaling."""

from __future__ import annotations

import math

import torch

from specroll.model.config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> torch.Tensor:
    """Per-pair rotation frequencies, shape (head_dim // 2,), float32."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    inv_freq = 1.0 / (rope.theta**exponents)
    if rope.rope_type == "linear":
        return inv_freq / rope.factor
    if rope.rope_type == "llama3":
        return _llama3_scaled(inv_freq, rope)
    return inv_freq


def _llama3_scaled(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    # Llama 3.1: long wavelengths are divided by `factor`, short ones kept, the band between
    # interpolated smoothly in 1 / wavelength.
    old_len = rope.original_max_position_embeddings
    low_freq_wavelen = old_len / rope.low_freq_factor
    high_freq_wavelen = old_len / rope.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryTable:
    """cos and sin of every position's rotation angles, computed once per block of positions and then
    gathered: a position's values are the same bits in every forward (computed per forward, an
    element's cos could take the vectorised or the scalar path depending on the tensor's size)."""

    POSITIONS_PER_BLOCK = 1024

    def __init__(self, inv_freq: torch.Tensor) -> None:
        self.inv_freq = inv_freq  # (head_dim/2,) float32
        self.cos = torch.empty(0, 2 * len(inv_freq), device="cpu")
        self.sin = torch.empty(0, 2 * len(inv_freq), device="cpu")
        self.is_frozen = False  # `freeze`

    def __call__(self, positions: torch.Tensor, num_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (B, T), each below `num_positions` (the host's bound: reading the largest from
        the device would synchronise) -> cos, sin each (B, 1, T, head_dim), float32, on positions' device."""
        self.reserve(num_positions, positions.device)
        return self.cos[positions][:, None], self.sin[positions][:, None]

    def reserve(self, num_positions: int, device: torch.device) -> None:
        """Hold at least `num_positions` positions from now on."""
        while self.cos.shape[0] < num_positions:
            if self.is_frozen:
                raise RuntimeError(
                    f"the rotary table holds {self.cos.shape[0]} positions and may not grow to "
                    f"{num_positions}: a recorded CUDA graph reads it by address"
                )
            self._add_block(device)

    def freeze(self, num_positions: int, device: torch.device) -> None:
        """Hold `num_positions` positions and never reallocate again: a CUDA graph that read the
        table would read freed memory after a reallocation, so growing past it raises instead."""
        self.reserve(num_positions, device)
        self.is_frozen = True

    def _add_block(self, device: torch.device) -> None:
        start = self.cos.shape[0]  # every block has the same shape, so the same arithmetic per offset
        block = torch.arange(start, start + self.POSITIONS_PER_BLOCK, dtype=torch.float32, device=device)
        freqs = block[:, None] * self.inv_freq.to(device)  # (P, head_dim/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos = torch.cat((self.cos.to(device), emb.cos()))
        self.sin = torch.cat((self.sin.to(device), emb.sin()))


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D) rotated by position; pairs are (i, i + D/2) as in the HF checkpoints."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
