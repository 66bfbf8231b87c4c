"""A bf16 draft head's linear layers on specroll's CPU kernels: the same parameters and state-dict
keys, outputs torch's to bf16's rounding, new weights packed again, and torch's path wherever a
gradient is asked or the head is not bf16."""

from __future__ import annotations

import copy

import pytest
import torch

from specroll.drafting.head_kernels import KernelLinear, use_cpu_kernels
from specroll.drafting.head_model import DraftHead, HeadConfig
from specroll.placement import cpu_kernels_ready

pytestmark = pytest.mark.skipif(not cpu_kernels_ready(), reason="specroll's CPU kernels cannot run here")


def _head(dtype=torch.bfloat16) -> DraftHead:
    torch.manual_seed(0)
    config = HeadConfig(64, 300, 48, intermediate_size=96, num_blocks=1, feature_layers=(0, 2))
    return DraftHead(config, torch.arange(48)).to(dtype).eval()


def _draft_logits(head: DraftHead, features: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
    return head.logits(head.step(head.first_feature(features), embedding)).float()


def test_every_linear_layer_runs_the_kernel_on_the_same_parameters():
    plain = _head()
    head = copy.deepcopy(plain)
    assert use_cpu_kernels(head)
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 6 and all(isinstance(m, KernelLinear) for m in linears)
    assert list(head.state_dict()) == list(plain.state_dict())
    features, embedding = torch.randn(3, 3 * 64).bfloat16(), torch.randn(3, 64).bfloat16()
    with torch.no_grad():
        got, want = _draft_logits(head, features, embedding), _draft_logits(plain, features, embedding)
    assert torch.allclose(got, want, rtol=3e-2, atol=3e-2)


def _kernel_head_and_other_weights():
    """A head on the kernels, a head of other weights, and inputs for both."""
    head, other = _head(), _head()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    use_cpu_kernels(head)
    return head, other, torch.randn(2, 3 * 64).bfloat16(), torch.randn(2, 64).bfloat16()


def test_new_weights_are_packed_again_and_gradients_take_torchs_path(monkeypatch):
    head, other, features, embedding = _kernel_head_and_other_weights()
    with torch.no_grad():
        before = _draft_logits(head, features, embedding)
        head.load_state_dict(other.state_dict())  # in place, as a spot trainer's weights arrive
        after = _draft_logits(head, features, embedding)
        assert torch.allclose(after, _draft_logits(other, features, embedding), rtol=3e-2, atol=3e-2)
    assert not torch.allclose(before, after, rtol=3e-2, atol=3e-2)
    calls = []
    monkeypatch.setattr(KernelLinear, "kernel", property(lambda self: calls.append(1)), raising=False)
    out = _draft_logits(head, features, embedding)  # gradients on: torch's linear, differentiable
    assert out.requires_grad and not calls


def test_a_float_head_keeps_torchs_layers():
    head = _head(torch.float32)
    assert not use_cpu_kernels(head)
    assert not any(isinstance(m, KernelLinear) for m in head.modules())


def test_offered_weights_packed_where_they_arrive_are_adopted_without_packing_again(monkeypatch):
    from specroll.cpu_kernels import ops
    from specroll.drafting import head_kernels

    head, other, features, embedding = _kernel_head_and_other_weights()
    offered = {k: v.float() for k, v in other.state_dict().items()}  # a trainer's float32 weights
    packed = head_kernels.packed_offer(head, offered)
    assert len(packed) == 6
    head.load_state_dict(offered)
    head_kernels.adopt_packed(head, packed)

    def no_packing(weight):
        raise AssertionError("packed again on the rollout's thread")

    monkeypatch.setattr(ops, "pack", no_packing)
    with torch.no_grad():
        got, want = _draft_logits(head, features, embedding), _draft_logits(other, features, embedding)
    assert torch.allclose(got, want, rtol=3e-2, atol=3e-2)
