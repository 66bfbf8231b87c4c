"""Exact mode in bf16 on the CPU: the same tokens and log-probabilities, to the bit, at any batch
size, speculative or plain, on a 49,152-token vocabulary and on the real SmolLM2.

Exact bf16 runs on specroll's CPU kernels where they build (`specroll.cpu_kernels`, each row's order
fixed by construction), else on oneDNN's kernels at probed row counts (weights packed once,
`model.packed_linear`), whose kernels have row-count regimes of their own that a bf16 output's
rounding hides from random operands: the probe's cancelling operands find them. Each identity is
also run in child processes on the other code paths (`CHILD_RUNS`): the probed BLAS on oneDNN's
AVX-512 emulation of bf16 (`ONEDNN_MAX_CPU_ISA=AVX512_CORE`, whose 1-row calls round otherwise, as an
AMX Xeon's do at some row counts), and the CPU kernels on VDPBF16PS's definition in AVX-512F.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_speculated, rollout, workload

from specroll.drafting.oracle import OracleDrafter
from specroll.model.packed_linear import can_pack
from specroll.policies.fixed import FixedDraftLength

import torch

pytestmark = pytest.mark.skipif(
    not can_pack(torch.bfloat16, "cpu"), reason="oneDNN packs no bf16 weights on this CPU"
)
EMULATED = "AVX512_CORE"  # oneDNN's bf16 without AVX512-BF16 or AMX instructions


def _outputs(requests):
    return [(r.output_token_ids, r.output_logprobs) for r in requests]


def _three_ways(model_dir, requests, **config) -> tuple[list, list, list]:
    """(batch 16, batch 1, speculative at batch 16 with drafts of 4, every third token wrong)."""
    wide = rollout(model_dir, requests(), dtype="bfloat16", max_batch_size=16, **config)
    narrow = rollout(model_dir, requests(), dtype="bfloat16", max_batch_size=1, **config)
    oracle = OracleDrafter({r.request_id: r.output_token_ids for r in wide}, corrupt_every=3)
    spec = rollout(
        model_dir, requests(), oracle, FixedDraftLength(4), dtype="bfloat16", max_batch_size=16, **config
    )
    assert_speculated(rollout.last_engine.telemetry)
    return _outputs(wide), _outputs(narrow), _outputs(spec)


@pytest.mark.parametrize("batch_invariant", [True, False])
def test_bf16_batch_size_and_speculation_change_no_bit(large_vocab_dir, one_thread, batch_invariant):
    if not batch_invariant and os.environ.get("ONEDNN_MAX_CPU_ISA") != EMULATED:
        pytest.skip("whether this CPU's own bf16 kernels have row regimes is the machine's, not asserted")
    wide, narrow, spec = _three_ways(large_vocab_dir, lambda: workload(6, 4), batch_invariant=batch_invariant)
    same = wide == narrow == spec
    assert same == batch_invariant  # on the emulated path the fast numerics round by batch shape


def _gsm8k_requests(smollm2_dir) -> list:
    """GSM8K's chat prompts for SmolLM2, 4 samples each, 24 tokens."""
    from specroll.rollout import RolloutConfig, encode_prompts, load_problems, make_requests
    from specroll.tokenizer import load_tokenizer

    config = RolloutConfig(model_dir=smollm2_dir, task="gsm8k", num_prompts=2, n=4, max_tokens=24)
    task, problems = load_problems(config)
    tokenizer = load_tokenizer(smollm2_dir)
    return make_requests(config, tokenizer, problems.values(), encode_prompts(tokenizer, task, problems))


def test_bf16_identity_on_smollm2(smollm2_dir, one_thread):
    """SmolLM2's real weights, activations and vocabulary."""
    wide, narrow, spec = _three_ways(smollm2_dir, lambda: _gsm8k_requests(smollm2_dir), max_model_len=160)
    assert wide == narrow == spec


CHILD_RUNS = {
    # the probed BLAS on oneDNN's AVX-512 emulation of bf16, where the fast numerics must differ (so
    # the test can fail) and the exact ones must not
    "onednn-emulated": {"ONEDNN_MAX_CPU_ISA": EMULATED, "SPECROLL_CPU_KERNELS": "off"},
    # specroll's CPU kernels with VDPBF16PS's definition in AVX-512F multiply-adds
    "cpu-kernels-emulated": {"ONEDNN_MAX_CPU_ISA": EMULATED, "SPECROLL_CPU_KERNELS": "emulated"},
}


@pytest.mark.skipif(bool(os.environ.get("ONEDNN_MAX_CPU_ISA")), reason="already on a chosen oneDNN ISA")
@pytest.mark.parametrize("kernels", sorted(CHILD_RUNS))
@pytest.mark.parametrize(
    "test", ["test_bf16_batch_size_and_speculation_change_no_bit", "test_bf16_identity_on_smollm2"]
)
def test_the_same_on_other_bf16_code_paths(test, kernels):
    """The identities again, in a child process on another code path (`CHILD_RUNS`)."""
    env = {**os.environ, **CHILD_RUNS[kernels]}
    here = Path(__file__)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{here}::{test}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=here.parents[2])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-1000:]
