"""What each kernel of a decode asks of a GPU, and the time that implies: a prediction for the first
GPU to check, not a measurement. No torch.

The model: a kernel reads and writes `bytes`; each of its programs streams at one SM's share of the
device's bandwidth (bandwidth / SMs), so `programs` of them reach min(programs, SMs) shares, capped
at the device's bandwidth; no kernel takes less than LAUNCH_US (a launch inside a CUDA graph and its
first memory latency). The fast numerics (cuBLAS, flash-decoding) are priced as the same bytes at
the device's full bandwidth: they split a layer until it fills the device, whatever that does to the
bits. Weights re-read by several row tiles are counted once (L2 holds them between programs of one
column tile, which run side by side).
"""

from __future__ import annotations

from dataclasses import dataclass

from specroll.kernels.plans import KEY_SPLIT, cdiv, linear_plan
from specroll.kernels.shapes import ModelShape

LAUNCH_US = 2.0  # the floor of one kernel's time: an assumption to check on a GPU
BF16 = 2  # bytes an element


@dataclass(frozen=True)
class Device:
    name: str
    bandwidth: float  # bytes/s of HBM
    num_sms: int


H100 = Device("H100 SXM", 3.35e12, 132)
H200 = Device("H200", 4.8e12, 132)
DEVICES = (H100, H200)


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a decode: what it moves and how many programs move it."""

    kernel: str
    num_bytes: int
    num_programs: int

    def seconds(self, device: Device) -> float:
        share = min(self.num_programs, device.num_sms) / device.num_sms
        return max(LAUNCH_US * 1e-6, self.num_bytes / (device.bandwidth * share))

    def fast_seconds(self, device: Device, fast_bytes: int | None = None) -> float:
        """The fast path's time for this launch's work moving `fast_bytes` (default its own); 0 bytes:
        the fast path has no such launch."""
        if fast_bytes == 0:
            return 0.0
        return max(
            LAUNCH_US * 1e-6, (self.num_bytes if fast_bytes is None else fast_bytes) / device.bandwidth
        )


def linear_launch(name: str, K: int, N: int, rows: int, has_bias: bool = False) -> tuple[Launch, int]:
    """(the exact kernel's launch, the bytes the fast one moves): weights, input and output, and the
    split's fp32 partials written and read back."""
    plan = linear_plan(K, N)
    moved = (K * N + rows * K + rows * N + N * has_bias) * BF16
    partials = 2 * 4 * rows * N * plan.num_splits if plan.num_splits > 1 else 0
    return Launch(f"linear {name} {K}->{N}", moved + partials, plan.num_programs(rows, N)), moved


def attention_launch(shape: ModelShape, rows: int, context: int) -> Launch:
    """A decode's attention: every row's keys and values for `context` positions, one program per
    (row, key head, range of KEY_SPLIT positions), and the ranges' fp32 partials written (the merge,
    `attention_merge_launch`, reads them)."""
    kv = 2 * rows * shape.num_kv_heads * context * shape.head_dim * BF16
    ranges = cdiv(context, KEY_SPLIT)
    partials = rows * shape.num_kv_heads * ranges * shape.group * (shape.head_dim + 2) * 4
    q = rows * shape.num_heads * shape.head_dim * BF16
    return Launch(f"attention ctx {context}", kv + q + partials, rows * shape.num_kv_heads * ranges)


def attention_merge_launch(shape: ModelShape, rows: int, context: int) -> Launch:
    """The ranges' partials merged in range order, one program per (row, key head), and the output."""
    partials = rows * shape.num_kv_heads * cdiv(context, KEY_SPLIT) * shape.group * (shape.head_dim + 2) * 4
    out = rows * shape.num_heads * shape.head_dim * BF16
    return Launch("attention merge", partials + out, rows * shape.num_kv_heads)


def layer_launches(shape: ModelShape, rows: int, context: int) -> list[tuple[Launch, int]]:
    """A decoder layer's kernels at a decode of `rows` rows, in the fused forward's order, each with
    the fast path's bytes (cache writes aside)."""
    H, I = shape.hidden, shape.intermediate
    norm = Launch("add_rms_norm", 4 * rows * H * BF16, rows)
    layers = shape.linear_layers()
    biased = {"q", "k", "v"} if shape.has_qkv_bias else set()
    linears = {name: linear_launch(name, *layers[name], rows, name in biased) for name in layers}
    q_k = rows * (shape.num_heads + shape.num_kv_heads) * shape.head_dim
    rotary = Launch("rotary", 2 * q_k * BF16 + 2 * rows * shape.head_dim * BF16, rows)
    silu = Launch("silu_mul", 3 * rows * I * BF16, cdiv(rows * I, 1024))
    attention = attention_launch(shape, rows, context)
    # what one fused kernel moves: keys, values, q and the output
    fused_attention = 2 * rows * (shape.num_kv_heads * context + shape.num_heads) * shape.head_dim * BF16
    merge = (attention_merge_launch(shape, rows, context), 0)  # no merge on the fast path
    plain = [(launch, launch.num_bytes) for launch in (norm, rotary, silu)]
    order = [
        plain[0],
        linears["q"],
        linears["k"],
        linears["v"],
        plain[1],
        (attention, fused_attention),
        merge,
    ]
    return order + [linears["o"], plain[0], linears["gate"], linears["up"], plain[2], linears["down"]]


def forward_launches(shape: ModelShape, rows: int, context: int) -> list[tuple[Launch, int]]:
    """Every layer, the final norm and the LM head at a decode."""
    head = linear_launch("lm_head", *shape.lm_head, rows)
    final_norm = Launch("add_rms_norm", 4 * rows * shape.hidden * BF16, rows)
    return shape.num_layers * layer_launches(shape, rows, context) + [
        (final_norm, final_norm.num_bytes),
        head,
    ]


@dataclass(frozen=True)
class ForwardPrediction:
    shape: str
    rows: int
    device: str
    weights_seconds: float  # the weights' read at the device's bandwidth
    exact_seconds: float
    fast_seconds: float


def predict_forward(shape: ModelShape, rows: int, device: Device, context: int) -> ForwardPrediction:
    launches = forward_launches(shape, rows, context)
    exact = sum(launch.seconds(device) for launch, _ in launches)
    fast = sum(launch.fast_seconds(device, moved) for launch, moved in launches)
    weights = shape.num_weights() * BF16 / device.bandwidth
    return ForwardPrediction(shape.name, rows, device.name, weights, exact, fast)
