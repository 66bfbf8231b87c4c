"""The fused forward on the GPU's kernels, run by Triton's interpreter on the CPU: with the residual
adds inside the norms and rotary in one kernel, every logit and feature is the unfused kernels' bits
(SiLU apart: its exp is each library's own), and a decoder layer launches fewer kernels.

Kernels a forward launches, counted here for SmolLM2's shape (Llama: 30 layers, 9 query heads over
3 key heads, no biases, no q/k norms; its sizes shrunk, which the counts do not depend on) as the
Triton launches (`kernels.launches`) plus torch's ops that compute (`engine.step_counters`, less
allocations and views), one per kernel on a GPU run eagerly:

| forward | unfused: a layer | fused: a layer | unfused: a forward | fused: a forward |
|---|---|---|---|---|
| decode (1 token a row) | 27 (11 Triton + 16 torch) | 15 (13 Triton + 2 torch) | 816 | 457 |
| verification (5 a row) | 29 (11 + 18) | 17 (13 + 4) | 876 | 517 |

A fused layer: 7 linear, rotary, attention and the merge of its key ranges, 2 add_rms_norm (the
first layer: rms_norm and one),
silu_mul, and torch's 2 index_copy_ writing K and V to the cache (and, 5 tokens a row, 2 copies
into the cache's head-major order). The 14 torch ops the fusion removes, for 2 more Triton launches
(rotary, silu_mul; an add_rms_norm stands for each rms_norm): rotary's 2 neg, 2 cat, 4 mul and 2
add; SiLU and its mul; 2 residual adds. A forward adds the embedding, the rotary table's 2 gathers,
the logit rows' gathers (2 fused: the residual and the last MLP's output), the final norm and the
LM head. (Before the attention kernel read q and wrote its output in the projections' (B, T, H, D)
layout, 5 tokens a row also copied both: 30 a layer, 906 a forward.)"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
import torch

from triton_required import require_triton

require_triton()

from specroll.engine.step_counters import count_device_work  # noqa: E402
from specroll.kernels.launches import count_launches  # noqa: E402
from specroll.model.loader import load_model, read_config  # noqa: E402
from specroll.model.runner import ModelRunner, SequenceInput  # noqa: E402
from specroll.model.transformer import MLP, CausalLM  # noqa: E402

SMOLLM2_SHAPE = Path(__file__).parents[2] / "scripts" / "gpu_check" / "smollm2"  # its config.json
NUM_LAYERS = 30  # SmolLM2-135M's
NOT_KERNELS = {"empty_like", "_unsafe_view"}  # an allocation and a view: no kernel on a GPU


def _runner(model: CausalLM, fused: bool) -> ModelRunner:
    runner = ModelRunner(model, 3, 64, batch_invariant=True, kernels="triton")
    model.use_triton_kernels(fused)
    return runner


def _forwards(runner: ModelRunner) -> list[torch.Tensor]:
    """Logits and features of a prefill beside another prompt, then of a verification 4 wide."""
    prefill = runner.forward(
        [SequenceInput(0, 0, [5, 17, 33, 40, 41], num_logits=3), SequenceInput(1, 0, [9, 8])]
    )
    verify = runner.forward([SequenceInput(0, 5, [7, 8, 9, 10], num_logits=4), SequenceInput(1, 2, [3])])
    return [prefill.logits, prefill.hidden, verify.logits, verify.hidden]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_forward_is_the_unfused_kernels_bits_but_for_silu(tiny_checkpoint, dtype):
    """Each architecture (Qwen2's biases, Qwen3's q/k norms, Llama 3's scaled rotary), fp32 and bf16,
    both layers' outputs among the features (the first's formed in the second's input norm, the
    last's in the final norm after the gather): the fused forward, given torch's SiLU, is the
    unfused forward's bits."""
    _, directory, _ = tiny_checkpoint
    unfused, fused = (_runner(load_model(directory, dtype=dtype), is_fused) for is_fused in (False, True))
    for module in fused.model.modules():
        if isinstance(module, MLP):
            module.kernel = None  # torch's SiLU, as unfused: the one elementwise op whose bits differ
    for runner in (unfused, fused):
        runner.use_feature_layers((0, 1))
    for a, b in zip(_forwards(unfused), _forwards(fused), strict=True):
        assert torch.equal(a, b)


WIDTHS = (1, 5)  # a decode, a verification of 4 drafts


def _kernels_launched(num_layers: int, fused: bool) -> dict[int, tuple[Counter[str], int]]:
    """width -> the Triton kernels and the number of torch's computing ops of one forward (logits
    included) of 2 rows, `width` tokens each, after a prefill, on SmolLM2's shape with `num_layers`."""
    torch.manual_seed(0)
    shape = read_config(SMOLLM2_SHAPE)
    config = dataclasses.replace(
        shape, vocab_size=97, hidden_size=144, intermediate_size=96, head_dim=16, num_layers=num_layers
    )
    model = CausalLM(config)
    runner = _runner(model, fused)
    runner.forward([SequenceInput(s, 0, [3, 4, 5, 6]) for s in range(2)])
    counts, start = {}, 4
    for width in WIDTHS:
        batch = runner.prepare([SequenceInput(s, start, [7] * width, num_logits=width) for s in range(2)])
        with count_device_work(None) as ops, count_launches() as triton:
            model(batch, runner.cache)
        counts[width] = triton, sum(n for name, n in ops.ops.items() if name not in NOT_KERNELS)
        start += width
    return counts


def _per_layer_and_forward(fused: bool) -> dict[int, tuple[Counter[str], int, int]]:
    """width -> the Triton kernels of a layer, all kernels of a layer, and all kernels of a 30-layer
    forward: a second layer's increase, and the one-layer forward plus 29 more."""
    one, two = _kernels_launched(1, fused), _kernels_launched(2, fused)
    counts = {}
    for width in WIDTHS:
        (triton_1, torch_1), (triton_2, torch_2) = one[width], two[width]
        layer = (triton_2.total() - triton_1.total()) + (torch_2 - torch_1)
        counts[width] = triton_2 - triton_1, layer, triton_1.total() + torch_1 + (NUM_LAYERS - 1) * layer
    return counts


def test_a_fused_layer_launches_fewer_kernels():
    """The counts of the module docstring's table, (a layer, a 30-layer forward) by width."""
    unfused, fused = _per_layer_and_forward(False), _per_layer_and_forward(True)
    for width in WIDTHS:
        assert unfused[width][0] == {"linear": 7, "rms_norm": 2, "attention": 1, "attention_merge": 1}
        assert fused[width][0] == {
            "linear": 7, "rotary": 1, "attention": 1, "attention_merge": 1, "add_rms_norm": 2, "silu_mul": 1
        }  # fmt: skip
    assert {width: counts[1:] for width, counts in unfused.items()} == {1: (27, 816), 5: (29, 876)}
    assert {width: counts[1:] for width, counts in fused.items()} == {1: (15, 457), 5: (17, 517)}
