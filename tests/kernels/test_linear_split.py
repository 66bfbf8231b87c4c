"""The linear kernel's split along K and its tile widths, chosen from (K, N) alone: on the engine's
shapes (SmolLM2 and two 7B-class models) a decode's programs fill an H100, and a row's bits do not
depend on the row count, in Triton's interpreter. The 7B shapes' plans run there on scaled shapes
(the same tile width and number of splits, the last split ragged): their real sizes take minutes
interpreted."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from triton_required import require_triton

require_triton()

import specroll.kernels.linear as linear  # noqa: E402
import specroll.kernels.plans as plans  # noqa: E402
from specroll.kernels.linear import invariant_linear  # noqa: E402
from specroll.kernels.plans import LinearPlan, linear_plan  # noqa: E402

SMOLLM2 = {"q/o": (576, 576), "k/v": (576, 192), "gate/up": (576, 1536), "down": (1536, 576)}
QWEN2_7B = {"q/o": (3584, 3584), "k/v": (3584, 512), "gate/up": (3584, 18944), "down": (18944, 3584)}
LLAMA_8B = {"q/o": (4096, 4096), "k/v": (4096, 1024), "gate/up": (4096, 14336), "down": (14336, 4096)}
LM_HEADS = {"smollm2": (576, 49152), "qwen2-7b": (3584, 152064)}
SEVEN_B = {f"qwen2-7b {k}": v for k, v in QWEN2_7B.items()}
SEVEN_B |= {f"llama-8b {k}": v for k, v in LLAMA_8B.items()}
H100_SMS = 132
ALL = {f"smollm2 {k}": v for k, v in SMOLLM2.items()} | SEVEN_B | LM_HEADS


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_plan_covers_k_once_and_fills_an_h100_at_a_decode_unless_k_is_too_short(name):
    K, N = ALL[name]
    plan = linear_plan(K, N)
    assert plan == linear_plan(K, N)  # a pure function of (K, N)
    assert (plan.num_splits - 1) * plan.split_k < K <= plan.num_splits * plan.split_k, plan
    is_split_to_the_limit = plan.split_k == plans.MIN_SPLIT_TILES * plan.block_k
    assert plan.num_programs(1, N) >= H100_SMS or is_split_to_the_limit, plan
    assert plan.num_programs(1, N) == plan.num_programs(plans.BLOCK_M, N)  # a decode's: one row tile's
    if name in SEVEN_B:
        assert plan.num_programs(1, N) >= 224, plan  # at least 1.7 programs a SM on 132 SMs


def test_the_smollm2_q_projection_launches_ten_times_the_unsplit_kernels_programs():
    plan = linear_plan(576, 576)
    assert (plan.block_n, plan.num_splits) == (32, 5) and plan.num_programs(1, 576) == 90  # unsplit: 9


def _rows_alone_and_together(x, weight, bias, plan=None):
    """Rows 0-2 in one call against row 2 alone (the interpreter's cost is the programs, not rows;
    two row tiles: `test_kernel_invariance`)."""
    together = invariant_linear(x[:3], weight, bias, plan)
    assert torch.equal(invariant_linear(x[2:3], weight, bias, plan), together[2:])
    return together


def _layer(K: int, N: int, dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    weight, bias = torch.randn(N, K, generator=g) / K**0.5, torch.randn(N, generator=g)
    return torch.randn(3, K, generator=g).to(dtype), weight.to(dtype), bias.to(dtype)


@pytest.mark.parametrize("name", sorted(SMOLLM2))
def test_a_smollm2_layers_rows_are_the_same_bits_at_any_row_count_in_bf16(name):
    K, N = SMOLLM2[name]
    x, weight, bias = _layer(K, N, torch.bfloat16, K + N)
    together = _rows_alone_and_together(x, weight, bias)
    expected = F.linear(x.float(), weight.float(), bias.float())
    assert (together.float() - expected).abs().max() < 0.05


def test_a_split_layers_rows_are_the_same_bits_at_any_row_count_in_fp32():
    x, weight, bias = _layer(*_scaled(linear_plan(1536, 576))[:2], torch.float32, 3)
    together = _rows_alone_and_together(x, weight, bias, _scaled(linear_plan(1536, 576))[2])
    assert (together - F.linear(x, weight, bias)).abs().max() < 1e-4


def _scaled(plan: LinearPlan) -> tuple[int, int, LinearPlan]:
    """A small (K, N, plan) with `plan`'s tile width and number of splits: splits of two BLOCK_K
    tiles, the last one ragged, three column tiles and a ragged fourth."""
    split_k = 2 * plan.block_k
    K, N = (plan.num_splits - 1) * split_k + plan.block_k + 7, 3 * plan.block_n + 5
    return K, N, LinearPlan(plan.block_n, plan.block_k, plan.num_splits, split_k)


@pytest.mark.parametrize("name", sorted(SEVEN_B))
def test_a_7b_layers_plan_keeps_a_rows_bits_at_any_row_count_on_a_scaled_shape(name):
    K, N, plan = _scaled(linear_plan(*SEVEN_B[name]))
    x, weight, bias = _layer(K, N, torch.bfloat16, K)
    together = _rows_alone_and_together(x, weight, bias, plan)
    assert (together.float() - F.linear(x.float(), weight.float(), bias.float())).abs().max() < 0.05


def test_the_split_leaves_its_counters_zero_and_a_call_repeats_to_the_bit():
    K, N, plan = _scaled(linear_plan(1536, 576))
    x, weight, bias = _layer(K, N, torch.bfloat16, 4)
    first = invariant_linear(x, weight, bias, plan)
    counters = linear._counters[x.device][-1]
    assert not counters.any()
    assert torch.equal(invariant_linear(x, weight, bias, plan), first) and not counters.any()
