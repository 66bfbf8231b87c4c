"""A draft head's linear layers on specroll's CPU kernels, where the head drafts in bf16 on a CPU
that runs them (`placement.cpu_kernels_ready`).

A head's step at batch 1 is a few small matrix-vector products (SmolLM2's one-block head: 6.7 M
weights), where torch's bf16 path spends more on each call than on its arithmetic: the head's
proposal took about 2 ms a draft token beside a 12.4 ms target forward (`benchmarks/step_parts.py`,
batch 1). The kernels are the target's own (`cpu_kernels.ops.PackedLinear`: each layer multiplies
on a packed copy of its weight, packed again when the weight changes, e.g. when a spot trainer's
weights are loaded into it).

A spot trainer offers new weights some twenty times a rollout step, and packing the head's six
layers takes some 17 ms: so they are packed where they arrive, on the receiver's thread
(`packed_offer`), and the rollout's thread, between two forwards, loads them and adopts the packed
copies (`adopt_packed`).

A drafted token's bits may differ from torch's (the kernels round as specroll's forward does), which
changes a draft, never a token: verification decides what is emitted. A layer calls the kernel only
for bf16 inputs and weights on the CPU with no gradient asked; a float copy for a trainer
(`DraftHeadDrafter.trainable_copy`), or any call that records a graph, runs `F.linear`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from typing import Mapping

from specroll.cpu_kernels.ops import PackedLinear, pack
from specroll.placement import cpu_kernels_ready


class KernelLinear(nn.Linear):
    """`nn.Linear` whose inference calls in bf16 on the CPU run specroll's kernel; its parameters and
    state-dict keys are the layer's it replaced."""

    kernel: PackedLinear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if x.dtype == w.dtype == torch.bfloat16 and x.device.type == "cpu" and not torch.is_grad_enabled():
            return self.kernel(x, w, self.bias)
        return F.linear(x, w, self.bias)


def use_cpu_kernels(head: nn.Module) -> bool:
    """Every `nn.Linear` of `head` (in place) a `KernelLinear` sharing its parameters, where the head's
    weights are bf16 on the CPU and the kernels are ready; returns whether it did."""
    weight = next(head.parameters(), None)
    if weight is None or weight.dtype != torch.bfloat16 or weight.device.type != "cpu":
        return False
    if not cpu_kernels_ready():
        return False
    for module in list(head.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                module._modules[name] = _kernel_linear(child)
    return True


def packed_offer(head: nn.Module, weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The packed copies of offered weights (a state dict of `head`'s) for each of `head`'s
    `KernelLinear` layers, by layer name; empty for a head without them."""
    return {
        name: pack(weights[f"{name}.weight"])
        for name, module in head.named_modules()
        if isinstance(module, KernelLinear) and f"{name}.weight" in weights
    }


def adopt_packed(head: nn.Module, packed: Mapping[str, torch.Tensor]) -> None:
    """After the offered weights were loaded into `head`: each layer's kernel takes its packed copy
    (`packed_offer`) instead of packing again at its next call."""
    for name, module in head.named_modules():
        if isinstance(module, KernelLinear) and name in packed:
            module.kernel.adopt(module.weight, packed[name])


def _kernel_linear(linear: nn.Linear) -> KernelLinear:
    swapped = KernelLinear.__new__(KernelLinear)
    nn.Module.__init__(swapped)
    swapped.in_features, swapped.out_features = linear.in_features, linear.out_features
    swapped.weight = linear.weight  # the same Parameters
    swapped.register_parameter("bias", linear.bias)
    swapped.kernel = PackedLinear()
    return swapped
