"""The CPU linear kernel: each output the instruction-defined sequence of pair steps, whatever the call.

Layers: literal values; a slow reference of the definition, pair by pair in torch, which the kernel
must equal to the bit (so a kernel that adds in any other order fails, as the even-first check
shows it would); row invariance at every row count; threads; the instruction against its definition.
"""

from __future__ import annotations

import pytest
import torch

from specroll.cpu_env import host_cpu_flags
from specroll.cpu_kernels import ops
from specroll.cpu_kernels.probe import bf16_instruction_agrees, probe_operands

TINY = 1.1754943508222875e-38  # the smallest normal fp32


def _flushed(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t.abs() < TINY, torch.zeros_like(t), t)


def defined_sums(x: torch.Tensor, weight: torch.Tensor, odd_first: bool = True) -> torch.Tensor:
    """The slow reference: fp32 sums over k pairs in order, each pair's odd product added first (as
    VDPBF16PS defines it), denormals read as zero and flushed."""
    K = x.shape[1] + x.shape[1] % 2
    xs = _flushed(torch.nn.functional.pad(x.float(), (0, K - x.shape[1])))
    ws = _flushed(torch.nn.functional.pad(weight.float(), (0, K - weight.shape[1])))
    sums = torch.zeros(x.shape[0], weight.shape[0])
    for k in range(0, K, 2):
        for j in (k + 1, k) if odd_first else (k, k + 1):
            sums = _flushed(sums + xs[:, j : j + 1] * ws[:, j][None])
    return sums


def _operands(rows: int, inputs: int, outputs: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, inputs, generator=g) * torch.rand(rows, 1, generator=g)).bfloat16()
    return x, (torch.randn(outputs, inputs, generator=g) * 0.05).bfloat16()


def test_a_literal_product():
    x = torch.tensor([[1.0, 2.0, 3.0]]).bfloat16()
    weight = torch.tensor([[1.0, 1.0, 1.0], [0.5, -1.0, 2.0]]).bfloat16()
    bias = torch.tensor([0.25, -1.0]).bfloat16()
    out = ops.PackedLinear()(x, weight, bias)
    assert out.dtype == torch.bfloat16 and out.tolist() == [[6.25, 3.5]]


@pytest.mark.parametrize("shape", [(7, 64, 48), (13, 577, 40), (3, 96, 1000)])  # odd K, N not of 16
def test_every_output_is_the_defined_sequence_of_pair_steps(shape):
    x, weight = _operands(*shape)
    packed = ops.pack(weight)
    sums = ops.linear_packed(x, packed, None, weight.shape[0], ops.native_bf16(), fp32_out=True)
    assert torch.equal(sums, defined_sums(x, weight))
    assert not torch.equal(sums, defined_sums(x, weight, odd_first=False))  # the reference can tell orders
    bias = torch.randn(weight.shape[0]).bfloat16()
    out = ops.PackedLinear()(x, weight, bias)
    assert torch.equal(out, (defined_sums(x, weight) + bias.float()).bfloat16())


@pytest.mark.parametrize("inputs,outputs", [(576, 576), (576, 1536), (1536, 576)])
def test_a_row_is_the_same_bits_in_a_call_of_any_row_count(inputs, outputs):
    x, weight = _operands(70, inputs, outputs, seed=inputs + outputs)
    linear = ops.PackedLinear()
    whole = linear(x, weight, None)
    for rows in (*range(1, 17), 23, 40, 64, 70):
        for start in range(0, 70 - rows + 1, max(rows, 9)):
            assert torch.equal(linear(x[start : start + rows], weight, None), whole[start : start + rows])


def test_two_threads_give_one_threads_bits(threads):
    x, weight = _operands(24, 576, 1536, seed=3)
    threads(1)
    one = ops.PackedLinear()(x, weight, None)
    threads(2)
    assert torch.equal(ops.PackedLinear()(x, weight, None), one)


def test_the_packed_copy_follows_its_weight():
    x, weight = _operands(2, 64, 32)
    linear = ops.PackedLinear()
    before = linear(x, weight, None)
    weight.mul_(2)  # an in-place update, as new weights arrive
    assert torch.equal(linear(x, weight, None), (defined_sums(x, weight)).bfloat16())
    assert not torch.equal(linear(x, weight, None), before)


@pytest.mark.skipif("avx512_bf16" not in host_cpu_flags(), reason="this CPU has no VDPBF16PS")
def test_the_instruction_gives_its_definitions_bits_here():
    x, weight = probe_operands()
    packed = ops.pack(weight)
    native = ops.linear_packed(x, packed, None, weight.shape[0], True, fp32_out=True)
    emulated = ops.linear_packed(x, packed, None, weight.shape[0], False, fp32_out=True)
    assert bf16_instruction_agrees() and torch.equal(native, emulated)
    assert torch.equal(emulated, defined_sums(x, weight))


def test_bad_operands_are_refused_by_name():
    x, weight = _operands(2, 64, 32)
    with pytest.raises(RuntimeError, match="bf16 CPU tensor"):
        ops.PackedLinear()(x.float(), weight, None)
    with pytest.raises(RuntimeError, match="features"):
        ops.linear_packed(x[:, :10], ops.pack(weight), None, 32, False)
