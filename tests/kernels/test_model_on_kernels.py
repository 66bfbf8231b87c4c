"""The model and the engine on the GPU's batch-invariant kernels, run by Triton's interpreter on the
CPU: the kernels are chosen by device, a row's logits are the same bits in any forward, and
speculative decoding gives plain decoding's tokens and log-probabilities to the bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from triton_required import require_triton

require_triton()

from specroll.drafting.oracle import OracleDrafter  # noqa: E402
from specroll.engine.engine import Engine, add_requests  # noqa: E402
from specroll.engine.request import Request, SamplingParams  # noqa: E402
from specroll.engine_config import EngineConfig  # noqa: E402
from specroll.kernels.add_rms_norm import invariant_add_rms_norm  # noqa: E402
from specroll.kernels.attention import invariant_attention  # noqa: E402
from specroll.kernels.linear import invariant_linear  # noqa: E402
from specroll.kernels.rms_norm import invariant_rms_norm  # noqa: E402
from specroll.kernels.rotary import invariant_rotary  # noqa: E402
from specroll.kernels.silu_mul import invariant_silu_mul  # noqa: E402
from specroll.model.loader import load_model, read_config  # noqa: E402
from specroll.model.runner import ModelRunner, SequenceInput  # noqa: E402
from specroll.model.transformer import MLP, Attention, CausalLM, Linear, RMSNorm  # noqa: E402
from specroll.placement import invariant_kernels  # noqa: E402
from specroll.policies.fixed import FixedDraftLength  # noqa: E402


SMOLLM2_SHAPE = Path(__file__).parents[2] / "scripts" / "gpu_check" / "smollm2"  # its config.json


def test_a_model_on_a_gpu_gets_the_triton_kernels_checked_on_meta():
    """The selection by device, without a GPU: SmolLM2's shape built on `meta` takes the kernels
    `invariant_kernels("cuda")` names, every linear layer, norm and attention of it, and the fused
    forward's: each norm adds its residual, rotary and SiLU(gate) * up in one kernel each."""
    with torch.device("meta"):
        model = CausalLM(read_config(SMOLLM2_SHAPE))
    model.use_batch_invariant_numerics(invariant_kernels("cuda"))
    expected = {Linear: invariant_linear, RMSNorm: invariant_rms_norm, Attention: invariant_attention}
    modules = [m for m in model.modules() if type(m) in expected]
    assert len(modules) == 10 * model.config.num_layers + 2  # a layer: 7 linear, 2 norms, attention
    assert all(m.kernel is expected[type(m)] for m in modules)
    assert model.fuses_residual_adds
    assert all(m.add_kernel is invariant_add_rms_norm for m in modules if type(m) is RMSNorm)
    assert all(m.rotary_kernel is invariant_rotary for m in modules if type(m) is Attention)
    assert all(m.kernel is invariant_silu_mul for m in model.modules() if type(m) is MLP)
    with pytest.raises(ValueError, match="'probed', 'cpu' or 'triton'"):
        model.use_batch_invariant_numerics("cublas")


def _alone_and_in_a_batch(runner: ModelRunner) -> tuple[list, list]:
    """Row A's logits at 4 positions: prefilled alone then decoded token by token, versus prefilled
    beside other prompts and verified in one width-4 forward beside other rows."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, runner.config.vocab_size, (n,), generator=g).tolist() for n in (21, 40, 9)]
    a, follow = prompts[0], [5, 17, 29]
    alone = [runner.forward([SequenceInput(0, 0, a)]).logits[0, 0]]
    alone += [runner.forward([SequenceInput(0, len(a) + i, [t])]).logits[0, 0] for i, t in enumerate(follow)]
    prefills = [SequenceInput(s, 0, p) for s, p in ((1, prompts[1]), (0, a), (2, prompts[2]))]
    batched = [runner.forward(prefills)]
    out = runner.forward(
        [
            SequenceInput(2, len(prompts[2]), [7, 8]),
            SequenceInput(0, len(a), [*follow, 1], num_logits=4),
            SequenceInput(1, len(prompts[1]), [9]),
        ]
    )
    return alone, [batched[0].logits[1, 0]] + [out.logits[1, i] for i in range(3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_runner_logits_are_the_same_bits_in_any_forward(qwen2_dir, dtype):
    runner = ModelRunner(load_model(qwen2_dir, dtype=dtype), 4, 200, batch_invariant=True, kernels="triton")
    alone, batched = _alone_and_in_a_batch(runner)
    assert all(torch.equal(x, y) for x, y in zip(alone, batched))


def _workload(vocab_size: int) -> list[Request]:
    requests = []
    for p in range(3):
        prompt = tuple(3 + (p * 7 + i * 5) % (vocab_size - 3) for i in range(4 + p))
        for s in range(2):
            params = SamplingParams(max_tokens=8 + 4 * p, temperature=1.0)
            requests.append(Request(p * 2 + s, p, s, prompt, params))
    return requests


def _rollout(model_dir, dtype, drafter=None, policy=None, static=False) -> tuple[list[Request], Engine]:
    """static: decode steps at static shapes (`--cuda-graphs on`, eager here), each launched before the
    previous is read back (overlap, where there is no drafter)."""
    config = EngineConfig(
        max_batch_size=8, max_model_len=64, max_draft=4, seed=11, dtype=str(dtype)[6:], cuda_graphs=static
    )
    model = load_model(model_dir, dtype=dtype)
    slots, capacity = config.max_batch_size, config.cache_capacity
    runner = ModelRunner(model, slots, capacity, batch_invariant=True, kernels="triton")
    if static:
        runner.use_static_forwards(config.max_draft + 1)
    engine = Engine(runner, config, drafter, policy)
    requests = _workload(runner.config.vocab_size)
    assert not add_requests(engine, requests)
    engine.run()
    return requests, engine


_PLAIN: dict[tuple[str, torch.dtype], list[Request]] = {}


def _plain(model_dir, dtype) -> list[Request]:
    """The eager plain rollout on the kernels, run once per checkpoint and dtype (interpreted, it is
    the slow part of the tests that compare with it)."""
    key = (str(model_dir), dtype)
    if key not in _PLAIN:
        _PLAIN[key] = _rollout(model_dir, dtype)[0]
    return _PLAIN[key]


def _assert_same_bits(expected: list[Request], got: list[Request]) -> None:
    for a, b in zip(expected, got, strict=True):
        assert a.output_token_ids == b.output_token_ids, a.request_id
        assert a.output_logprobs == b.output_logprobs, a.request_id


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_speculative_gives_plain_tokens_and_logprobs_to_the_bit(qwen2_dir, dtype):
    """A tiny Qwen2 in fp32 and bf16 on the kernels: oracle drafts (one in three wrong) verified 4
    wide beside other requests give plain decoding's tokens and log-probabilities exactly."""
    plain = _plain(qwen2_dir, dtype)
    outputs = {r.request_id: r.output_token_ids for r in plain}
    drafter = OracleDrafter(outputs, corrupt_every=3, vocab_size=read_config(qwen2_dir).vocab_size)
    spec, engine = _rollout(qwen2_dir, dtype, drafter, FixedDraftLength(4))
    forwards = engine.telemetry.decode_forwards
    assert sum(f.num_accepted for f in forwards) > 0 and sum(f.num_drafted for f in forwards) > 0
    _assert_same_bits(plain, spec)


def test_overlapped_static_steps_give_the_eager_steps_bits(qwen2_dir):
    """bf16 on the kernels: plain decoding at static shapes with each step launched before the
    previous one is read back (its fed token gathered from the device) gives the eager engine's
    tokens and log-probabilities exactly."""
    overlapped, engine = _rollout(qwen2_dir, torch.bfloat16, static=True)
    assert engine.overlaps and engine.telemetry.steps_launched_ahead > 0
    _assert_same_bits(_plain(qwen2_dir, torch.bfloat16), overlapped)
