"""Per-forward latency of one worker (a model replica over `num_gpus` GPUs), from the roofline.

A decode forward over b sequences of q tokens each, with S context tokens in the KV cache in total,
takes  overhead + max(gemm, weights) + attention, where
    gemm      = 2 * active_params * b * q / (num_gpus * peak_flops * flops_efficiency)
    weights   = weight bytes read / (num_gpus * bandwidth * bw_efficiency)
    attention = S * kv_bytes_per_token / (num_gpus * bandwidth * bw_efficiency)
The roofline is taken per kernel class and the classes are summed: within a layer the projection GEMMs
and the attention kernel run one after the other, so the KV read cannot hide the GEMMs' compute. A
single max over the whole forward would let a k-token verification at batch 128 and long context cost
the same as a one-token decode, against SpecActor §3 (Fig. 5b, 6a): there, verification at per-worker
batch 128 grows with the token batch until speculation gains nothing.
The overhead (kernel launches, tensor-parallel all-reduces, sampling) is per forward. The presets
calibrate it so that Qwen2.5-32B on one TP4 H100 worker decodes at 13 ms per token at batch 1, the
figure SpecActor §5.1 reports for its platform. A `specroll profile` fit can replace the roofline
(`profiled_cost.ProfiledCost`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

GIB = 1024**3


class ForwardCost(Protocol):
    def forward_seconds(self, num_seqs: int, tokens_per_seq: float, context_tokens: float) -> float: ...


def prefill_seconds(cost: ForwardCost, num_tokens: Sequence[float]) -> float:
    """One prefill forward over requests whose contexts (`num_tokens` each) are computed together:
    every row padded to the longest, as the engine pads a prefill, and each token attending on
    average to half its row (causal attention). The simulator's one prefill charge; requests admitted
    together share forwards (`worker.Worker.admit`). A `specroll profile` fit times decode and
    verification widths only, so on `ProfiledCost` this extrapolates the fit far past the widths it saw."""
    if len(num_tokens) == 0 or max(num_tokens) <= 0:
        return 0.0
    width = float(max(num_tokens))
    return cost.forward_seconds(len(num_tokens), width, len(num_tokens) * width / 2.0)


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_flops: float  # dense bf16 FLOP/s
    bandwidth: float  # HBM bytes/s
    memory_bytes: float

    def __post_init__(self) -> None:
        if min(self.peak_flops, self.bandwidth, self.memory_bytes) <= 0:
            raise ValueError("GPU figures must be positive")


GPUS = {
    # NVIDIA H100 SXM datasheet: 989 TFLOP/s dense BF16, 3.35 TB/s HBM3, 80 GB.
    "H100": GpuSpec("H100", 989e12, 3.35e12, 80e9),
    # H800 (Seer §6.1): H100 compute and memory, reduced NVLink, which this model does not separate.
    "H800": GpuSpec("H800", 989e12, 3.35e12, 80e9),
}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_params: float  # all weights
    num_active_params: float  # weights a token passes through (MoE: the active experts)
    num_layers: int
    kv_bytes_per_token: float  # K and V over all layers, bf16
    bytes_per_param: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.num_active_params <= self.num_params:
            raise ValueError("need 0 < active params <= params")

    @property
    def weight_bytes(self) -> float:
        return self.num_params * self.bytes_per_param

    def weight_bytes_read(self, num_tokens: float) -> float:
        """Dense models read every weight; an MoE reads the experts its tokens touch.

        With active fraction r, n tokens leave a fraction (1-r)^n of the expert weights unread.
        """
        dense = self.num_active_params == self.num_params
        if dense:
            return self.weight_bytes
        fraction = self.num_active_params / self.num_params
        touched = 1.0 - (1.0 - fraction) ** max(num_tokens, 1.0)
        return self.weight_bytes * max(touched, fraction)


def _gqa_kv_bytes(num_layers: int, num_kv_heads: int, head_dim: int) -> float:
    return 2.0 * num_layers * num_kv_heads * head_dim * 2.0


MODELS = {
    # Qwen2.5 config.json: 64 layers, 8 KV heads of 128 dims.
    "qwen2.5-32b": ModelSpec("qwen2.5-32b", 32.5e9, 32.5e9, 64, _gqa_kv_bytes(64, 8, 128)),
    "qwen2.5-0.5b": ModelSpec("qwen2.5-0.5b", 0.49e9, 0.49e9, 24, _gqa_kv_bytes(24, 2, 64)),
    "qwen2.5-1.5b": ModelSpec("qwen2.5-1.5b", 1.5e9, 1.5e9, 28, _gqa_kv_bytes(28, 2, 128)),
    # DeepSeek-R1-Distill-Qwen-7B (Qwen2.5-7B): 28 layers, 4 KV heads of 128 dims.
    "qwen2.5-7b": ModelSpec("qwen2.5-7b", 7.6e9, 7.6e9, 28, _gqa_kv_bytes(28, 4, 128)),
    # Qwen2-VL-72B: 80 layers, 8 KV heads of 128 dims (Seer Table 5: 146 GB of weights).
    "qwen2-vl-72b": ModelSpec("qwen2-vl-72b", 73e9, 73e9, 80, _gqa_kv_bytes(80, 8, 128)),
    # Moonlight-16B-A3B (Seer Table 5: 32 GB): 27 layers, MLA latent of 512+64 dims per layer.
    "moonlight": ModelSpec("moonlight", 16e9, 3e9, 27, 27 * 576 * 2.0),
    # Kimi-K2 (Seer Table 5: 1 TB, fp8 weights): 1T params, 32B active, 61 layers of MLA.
    "kimi-k2": ModelSpec("kimi-k2", 1.0e12, 32e9, 61, 61 * 576 * 2.0, bytes_per_param=1.0),
}


@dataclass(frozen=True)
class RooflineCost:
    model: ModelSpec
    gpu: GpuSpec
    num_gpus: int
    overhead_seconds: float  # per forward
    flops_efficiency: float = 0.5  # achieved fraction of peak in large GEMMs
    bandwidth_efficiency: float = 0.8  # achieved fraction of HBM bandwidth in decode
    memory_utilization: float = 0.9  # vLLM's gpu_memory_utilization default

    def __post_init__(self) -> None:
        if self.num_gpus < 1 or self.overhead_seconds < 0:
            raise ValueError("need num_gpus >= 1 and a non-negative overhead")
        if not (0 < self.flops_efficiency <= 1 and 0 < self.bandwidth_efficiency <= 1):
            raise ValueError("efficiencies must lie in (0, 1]")

    def forward_seconds(self, num_seqs: int, tokens_per_seq: float, context_tokens: float) -> float:
        num_tokens = num_seqs * tokens_per_seq
        flops = 2.0 * self.model.num_active_params * num_tokens
        gemm = flops / (self.num_gpus * self.gpu.peak_flops * self.flops_efficiency)
        weights = self._read_s(self.model.weight_bytes_read(num_tokens))
        attention = self._read_s(context_tokens * self.model.kv_bytes_per_token)
        return self.overhead_seconds + max(gemm, weights) + attention

    def _read_s(self, num_bytes: float) -> float:
        return num_bytes / (self.num_gpus * self.gpu.bandwidth * self.bandwidth_efficiency)

    @property
    def kv_capacity_tokens(self) -> float:
        """KV tokens one worker holds once weights are resident."""
        free = self.num_gpus * self.gpu.memory_bytes * self.memory_utilization - self.model.weight_bytes
        if free <= 0:
            raise ValueError(f"{self.model.name} does not fit on {self.num_gpus} x {self.gpu.name}")
        return free / self.model.kv_bytes_per_token

    def with_gpus(self, num_gpus: int) -> "RooflineCost":
        return RooflineCost(
            self.model,
            self.gpu,
            num_gpus,
            self.overhead_seconds,
            self.flops_efficiency,
            self.bandwidth_efficiency,
            self.memory_utilization,
        )


def calibrated_overhead(model: ModelSpec, gpu: GpuSpec, num_gpus: int, batch1_latency_s: float) -> float:
    """The per-forward overhead that makes a batch-1 decode at short context take batch1_latency_s."""
    bare = RooflineCost(model, gpu, num_gpus, 0.0).forward_seconds(1, 1, 0)
    if bare >= batch1_latency_s:
        raise ValueError("target latency is below the roofline's memory time")
    return batch1_latency_s - bare
