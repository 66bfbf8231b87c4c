"""Whether this CPU's VDPBF16PS gives the bits of its definition, checked once per process.

The linear kernel (`csrc/linear.h`) defines each output as a sequence of pair steps, each the
instruction's definition in Intel's manual: the odd element's product added, then the even one's,
each rounded to fp32, with denormal inputs read as zero and denormal results flushed. A CPU whose
instruction does so runs it; any other runs the definition in AVX-512F multiply-adds, the same bits
by construction. The probe multiplies operands spanning many magnitudes, cancelling sums and tiny
values both ways and compares every output's fp32 sum, unrounded.
"""

from __future__ import annotations

import functools

import torch


def probe_operands(rows: int = 24, inputs: int = 512, outputs: int = 256) -> tuple[torch.Tensor, ...]:
    """x (rows, inputs), weight (outputs, inputs) in bf16: normal values of scales 2^-12 .. 2^12,
    a few denormal and zero ones, and rows that cancel (a row's first half repeated negated)."""
    generator = torch.Generator().manual_seed(0)
    scales = 2.0 ** torch.randint(-12, 13, (rows, inputs), generator=generator)
    x = torch.randn(rows, inputs, generator=generator) * scales
    x[:, ::37] = 1e-39  # denormal in bf16
    x[:4, inputs // 2 :] = -x[:4, : inputs // 2]
    weight = torch.randn(outputs, inputs, generator=generator)
    weight[::5, ::11] = 0.0
    weight[::7, ::13] = -3e-39
    return x.to(torch.bfloat16), weight.to(torch.bfloat16)


@functools.cache
def bf16_instruction_agrees() -> bool:
    from specroll.cpu_kernels.ops import linear_packed, pack

    x, weight = probe_operands()
    packed = pack(weight)
    native = linear_packed(x, packed, None, weight.shape[0], True, fp32_out=True)
    defined = linear_packed(x, packed, None, weight.shape[0], False, fp32_out=True)
    return torch.equal(native.view(torch.int32), defined.view(torch.int32))
