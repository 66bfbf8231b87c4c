"""Exact mode on a CUDA device with the batch-invariant Triton kernels (`specroll.kernels`): a row's
bits do not depend on its forward, so speculative decoding gives plain decoding's tokens and
log-probabilities to the bit, in bf16 and fp32, eager and under recorded graphs. Skipped where torch
sees no GPU (the kernels' structure is checked there by tests/kernels in Triton's interpreter)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from specroll.drafting.oracle import OracleDrafter
from specroll.policies.fixed import FixedDraftLength

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from helpers import assert_lossless, rollout, workload  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
EXACT = dict(device="cuda", batch_invariant=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_speculative_equals_plain_to_the_bit_on_cuda(qwen2_dir, dtype, cuda_graphs):
    plain = rollout(qwen2_dir, workload(), **EXACT, dtype=dtype, cuda_graphs=cuda_graphs)
    drafts = OracleDrafter({r.request_id: r.output_token_ids for r in plain}, corrupt_every=5, vocab_size=97)
    spec = rollout(
        qwen2_dir, workload(), drafts, FixedDraftLength(4), **EXACT, dtype=dtype, cuda_graphs=cuda_graphs
    )
    assert_lossless(plain, spec, rollout.last_engine)  # no tolerance: the bits


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_trees_chosen_by_auto_equal_plain_to_the_bit_on_cuda(qwen2_dir, dtype):
    from specroll.drafting.registry import DrafterContext, make_drafter
    from specroll.policies.auto import AutoPolicy
    from specroll.policies.cost_model import CostModel

    free_width = CostModel(c_base=0.05, c_tok=1e-3, prices=[(1, 1, 1.0), (1, 9, 0.05 / 0.059)], device="cuda")
    plain = rollout(qwen2_dir, workload(), **EXACT, dtype=dtype, max_draft=8)
    drafter = make_drafter("suffix", DrafterContext(vocab_size=97))
    spec = rollout(qwen2_dir, workload(), drafter, AutoPolicy(free_width), **EXACT, dtype=dtype, max_draft=8)
    assert_lossless(plain, spec, rollout.last_engine)
    assert any(f.tree and f.num_accepted for f in rollout.last_engine.telemetry.decode_forwards)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kernels_rows_are_the_same_bits_for_any_row_count_on_cuda(dtype):
    from specroll.kernels.linear import invariant_linear
    from specroll.kernels.rms_norm import invariant_rms_norm

    g = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(1536, 576, device="cuda", generator=g).to(dtype)
    x = torch.randn(256, 576, device="cuda", generator=g).to(dtype)
    reference, normed = invariant_linear(x, weight, None), invariant_rms_norm(x, weight[0], 1e-5)
    for m in (1, 2, 3, 5, 8, 17, 40, 64, 65, 128, 200, 256):
        assert torch.equal(invariant_linear(x[m - 1 : m], weight, None), reference[m - 1 : m]), m
        assert torch.equal(invariant_linear(x[:m], weight, None), reference[:m]), m
        assert torch.equal(invariant_rms_norm(x[:m], weight[0], 1e-5), normed[:m]), m


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_kernels_are_the_unfused_bits_on_cuda(dtype):
    """The fused forward's add-and-norm is torch's add then the RMSNorm kernel, and its rotary is
    `apply_rotary` in torch, to the bit, at SmolLM2's shapes (tests/kernels check the interpreter)."""
    from specroll.kernels.add_rms_norm import invariant_add_rms_norm
    from specroll.kernels.rms_norm import invariant_rms_norm
    from specroll.kernels.rotary import invariant_rotary
    from specroll.model.config import RopeConfig
    from specroll.model.rope import RotaryTable, apply_rotary, inverse_frequencies

    g = torch.Generator(device="cuda").manual_seed(2)
    x, y = (torch.randn(64, 576, device="cuda", generator=g).to(dtype) for _ in range(2))
    weight = torch.randn(576, device="cuda", generator=g).to(dtype)
    total, normed = invariant_add_rms_norm(x, y, weight, 1e-5)
    assert torch.equal(total, x + y) and torch.equal(normed, invariant_rms_norm(x + y, weight, 1e-5))
    q = torch.randn(8, 5, 9, 64, device="cuda", generator=g).to(dtype).transpose(1, 2)  # (B, H, T, D)
    k = torch.randn(8, 5, 3, 64, device="cuda", generator=g).to(dtype).transpose(1, 2)
    positions = torch.randint(0, 4000, (8, 5), device="cuda", generator=g)
    cos, sin = RotaryTable(inverse_frequencies(RopeConfig(theta=1e5), 64))(positions, 4000)
    cos, sin = cos.to(dtype), sin.to(dtype)
    q_out, k_out = invariant_rotary(q, k, cos, sin)
    assert torch.equal(q_out, apply_rotary(q, cos, sin)) and torch.equal(k_out, apply_rotary(k, cos, sin))


def test_sampling_draws_and_logprobs_of_a_row_do_not_depend_on_the_batch_on_cuda():
    from specroll.sampling import policy_logprobs, sample_from, softmax

    g = torch.Generator(device="cuda").manual_seed(1)
    logits = torch.randn(200, 49152, device="cuda", generator=g) * 3
    u = torch.rand(200, device="cuda", generator=g)
    probs = softmax(logits)
    tokens, logprobs = sample_from(probs, u), policy_logprobs(logits, torch.arange(200, device="cuda"), 1.0)
    for m in (1, 7, 64):
        assert torch.equal(softmax(logits[:m]), probs[:m]), m
        assert torch.equal(sample_from(probs[m - 1 : m], u[m - 1 : m]), tokens[m - 1 : m]), m
        assert torch.equal(policy_logprobs(logits[:m], torch.arange(m, device="cuda"), 1.0), logprobs[:m]), m
