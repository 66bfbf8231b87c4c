"""The engine on a CUDA device: skipped where torch sees none (this project's CPU machines), run on
a GPU machine. What each test expects there, and why, is in its docstring; the figures a GPU run gives
belong in BENCHMARKS.md's GPU section."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from specroll.drafting.oracle import OracleDrafter
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.policies.fixed import FixedDraftLength

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from helpers import assert_lossless, rollout, workload  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
GPU = dict(device="cuda", batch_invariant=False)  # batch-invariant numerics are the CPU's only


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-4), (torch.bfloat16, 0.1)])
def test_runner_logits_match_transformers_on_cuda(tiny_checkpoint, dtype, atol):
    """fp32 as on the CPU; bf16 rounds every layer's output to 8 bits of mantissa, so logits of
    magnitude ~1 move by up to ~0.1 between two bf16 implementations."""
    arch, directory, hf_model = tiny_checkpoint
    hf_model = hf_model.to("cuda", dtype)
    runner = ModelRunner.from_pretrained(directory, num_slots=2, capacity=64, dtype=dtype, device="cuda")
    prompts = [[3, 4, 5, 6, 7, 8, 9], [10, 11, 12]]
    out = runner.forward([SequenceInput(s, 0, p) for s, p in enumerate(prompts)])
    for b, p in enumerate(prompts):
        with torch.no_grad():
            expected = hf_model(torch.tensor([p], device="cuda")).logits[0, -1].float()
        assert (out.logits[b, 0] - expected).abs().max().item() < atol, arch


def test_exact_mode_speculative_equals_plain_in_fp32_on_cuda(qwen2_dir):
    """The target: identity in fp32. Without batch-invariant kernels a row's logits may round
    otherwise in a forward of another shape; on a 97-token vocabulary a CDF boundary is rarely that
    close to a uniform, so a failure here is a finding to record, not noise to retry."""
    plain = rollout(qwen2_dir, workload(), **GPU)
    drafts = OracleDrafter({r.request_id: r.output_token_ids for r in plain}, corrupt_every=5, vocab_size=97)
    spec = rollout(qwen2_dir, workload(), drafts, FixedDraftLength(4), **GPU)
    assert_lossless(plain, spec, rollout.last_engine, logprob_tolerance=1e-4)


def test_rejection_mode_follows_the_target_on_cuda(qwen2_dir):
    """Speculative sampling's output distribution is the target's, on the device too: the first three
    tokens of 1000 requests of one prompt, against plain sampling's, within the seed-to-seed noise."""
    from test_rejection_mode import SamplingDrafter, requests, total_variation

    def histogram(drafter=None, policy=None, **config):
        done = rollout(qwen2_dir, requests(), drafter, policy, max_batch_size=256, **GPU, **config)
        return Counter(tuple(r.output_token_ids) for r in done)

    plain = histogram(seed=1)
    noise_floor = total_variation(plain, histogram(seed=2))
    spec = histogram(SamplingDrafter(97), FixedDraftLength(2), verify="rejection", seed=3)
    assert total_variation(plain, spec) < 1.5 * noise_floor + 0.02
