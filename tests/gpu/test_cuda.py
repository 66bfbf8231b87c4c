"""The engine on a CUDA device: skipped where torch sees none (this project's CPU machines), run on
a GPU machine. What each test expects there, and why, is in its docstring; the figures a GPU run gives
belong in BENCHMARKS.md's GPU section."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specroll.drafting.oracle import OracleDrafter
from specroll.engine_config import EngineConfig
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.policies.fixed import FixedDraftLength

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from helpers import assert_lossless, rollout, workload  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
GPU = dict(device="cuda", batch_invariant=False)  # the fast numerics (exact ones: test_exact_cuda.py)


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


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_exact_mode_speculative_equals_plain_in_fp32_on_cuda(qwen2_dir, cuda_graphs):
    """The target: identity in fp32. Without batch-invariant kernels a row's logits may round
    otherwise in a forward of another shape; on a 97-token vocabulary a CDF boundary is rarely that
    close to a uniform, so a failure here is a finding to record, not noise to retry."""
    plain = rollout(qwen2_dir, workload(), **GPU, cuda_graphs=cuda_graphs)
    drafts = OracleDrafter({r.request_id: r.output_token_ids for r in plain}, corrupt_every=5, vocab_size=97)
    spec = rollout(qwen2_dir, workload(), drafts, FixedDraftLength(4), **GPU, cuda_graphs=cuda_graphs)
    assert_lossless(plain, spec, rollout.last_engine, logprob_tolerance=1e-4)
    assert (rollout.last_engine.parts_for_testing().runner.static is not None) == cuda_graphs


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-4), (torch.bfloat16, 0.1)])
def test_cuda_graphs_replay_the_eager_forward(qwen2_dir, dtype, atol):
    """Each static shape is recorded once and replayed: the logits of every step, and of a step of a
    shape already recorded with other inputs, are the dynamic forward's (to rounding: other kernels'
    sums), and so is the cache the graph wrote."""
    eager, graphed = (
        ModelRunner.from_pretrained(qwen2_dir, 8, 128, dtype=dtype, device="cuda") for _ in range(2)
    )
    graphed.use_static_forwards(max_width=5)
    prompts = {0: [3, 4, 5, 6, 7, 8], 1: [9, 10, 11], 3: [12, 13, 14, 15]}
    steps = [  # a shape is recorded at its second use (`Replayer.min_uses`) and replayed at its third
        [SequenceInput(s, len(p) + 3 * i, [2 + i, 3, 4], num_logits=3) for s, p in prompts.items()]
        for i in range(3)
    ] + [[SequenceInput(3, 13, [1]), SequenceInput(0, 15, [8, 9], parents=[-1, -1], num_logits=2)]]
    for runner in (eager, graphed):
        runner.forward([SequenceInput(s, 0, p + [0] * 6) for s, p in prompts.items()])  # 9-12 wide: eager
    for step in steps:
        a, b = eager.forward(step), graphed.forward(step)
        assert (a.logits - b.logits).abs().max().item() < atol
    # the three (4 rows, 3 wide) steps: recorded at the second, replayed at the third; the last step's
    # shape (2 wide) is met once, so it runs eagerly (as `graph_stand_in` shows on the CPU)
    assert graphed.static.replayer.num_graphs == 1
    assert (
        eager.cache.keys[1][:4, :, :12].float() - graphed.cache.keys[1][:4, :, :12].float()
    ).abs().max() < atol


def test_a_recorded_graph_reads_weights_loaded_in_place(qwen2_dir):
    graphed = ModelRunner.from_pretrained(qwen2_dir, 4, 64, device="cuda")
    graphed.use_static_forwards(max_width=2)
    step = [SequenceInput(0, 0, [3, 4])]
    graphed.forward(step)
    before = graphed.forward(step).logits.clone()  # the second use records the graph
    assert graphed.static.replayer.num_graphs == 1
    graphed.load_weights({n: p * 1.5 for n, p in graphed.model.named_parameters()})
    after = graphed.forward(step).logits
    eager = ModelRunner.from_pretrained(qwen2_dir, 4, 64, device="cuda")
    eager.load_weights({n: p * 1.5 for n, p in eager.model.named_parameters()})
    assert not torch.allclose(before, after)
    assert (after - eager.forward(step).logits).abs().max().item() < 1e-4


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_rejection_mode_follows_the_target_on_cuda(qwen2_dir, cuda_graphs):
    """Speculative sampling's output distribution is the target's, on the device too: the first three
    tokens of 1000 requests of one prompt, against plain sampling's, within the seed-to-seed noise."""
    from test_rejection_mode import SamplingDrafter, requests, total_variation

    def histogram(drafter=None, policy=None, **config):
        done = rollout(
            qwen2_dir,
            requests(),
            drafter,
            policy,
            max_batch_size=256,
            **GPU,
            cuda_graphs=cuda_graphs,
            **config,
        )
        return Counter(tuple(r.output_token_ids) for r in done)

    plain = histogram(seed=1)
    noise_floor = total_variation(plain, histogram(seed=2))
    spec = histogram(SamplingDrafter(97), FixedDraftLength(2), verify="rejection", seed=3)
    assert total_variation(plain, spec) < 1.5 * noise_floor + 0.02


def test_a_recorded_verification_step_gives_the_eager_steps_tokens_on_cuda(qwen2_dir):
    """Forward, head and verification as one CUDA graph, recorded at its second use and replayed with
    new inputs at its third: in fp32 the eager step's tokens, log-probabilities to rounding."""
    from test_captured_step import _drafts, _requests, _sequences

    from specroll.engine.captured_step import CapturedStep
    from specroll.engine.verifier import verify_batch

    def runner():
        made = ModelRunner.from_pretrained(qwen2_dir, 8, 64, device="cuda")
        made.use_static_forwards(max_width=5)
        made.forward([SequenceInput(s, 0, [3, 4, 5, 6, 7, 8]) for s in (0, 1, 3, 5)])
        return made

    eager, graphed = runner(), runner()
    step = CapturedStep(graphed, 7, "exact", "inverse-cdf")
    for start in (6, 10, 14):  # eager, recorded, replayed
        requests, drafts = _requests(), _drafts(trees=True)
        sequences = [replace(s, start=start) for s in _sequences(requests, drafts)]
        expected = verify_batch(requests, drafts, eager.forward(sequences).logits, 7, "exact", "inverse-cdf")
        result = step.verify(requests, drafts, sequences)
        assert result.token_ids == expected.token_ids and result.num_accepted == expected.num_accepted
        assert (
            max(abs(a - b) for x, y in zip(result.logprobs, expected.logprobs) for a, b in zip(x, y)) < 1e-4
        )
    assert graphed.static.replayer.num_graphs == 1


def test_a_rollout_on_cuda_records_graphs_and_says_what_they_cost(tmp_path):
    from specroll.policies.cost_model import CostModel
    from specroll.rollout import RolloutConfig, run_rollout

    # a profile of the GPU, so that no measuring of prices before the rollout records graphs first
    profile = tmp_path / "gpu.cost.json"
    CostModel(c_base=1e-4, c_tok=1e-6, device="cuda").save(profile)
    config = RolloutConfig(  # the bundled policy: its tokenizer encodes the task's prompts
        num_prompts=4, n=4, max_tokens=32, engine=EngineConfig(**GPU), cost_model=profile
    )
    graphed = run_rollout(config.with_engine(cuda_graphs=True))
    eager = run_rollout(config)
    assert graphed.summary.output_tokens > 0 and not any(r.error for r in graphed.records)
    assert graphed.summary.graphs_recorded > 0 and graphed.summary.graph_recording_seconds > 0
    assert eager.summary.graphs_recorded == 0
    assert [r.token_ids for r in graphed.records] == [r.token_ids for r in eager.records]  # fp32: the target


def test_an_engine_without_a_profile_of_the_gpu_measures_its_prices_there(qwen2_dir, capsys):
    """No cuda profile: the engine times its own forwards on the GPU (as CUDA graphs, as it runs
    them) before the rollout, and its policy prices with that, not with the CPU's default."""
    from specroll.engine.factory import build_engine
    from specroll.engine.spec import EngineSpec

    engine = EngineConfig(max_batch_size=8, cuda_graphs=True, **GPU)
    spec = EngineSpec(qwen2_dir, 32, engine, drafter="prompt-lookup")
    prices = build_engine(spec, longest_prompt=16).policy.cost_model
    assert prices.device == "cuda" and prices.c_base + prices.c_tok > 0
    assert prices.source.endswith("on cuda, measured by the engine")
    assert "no cuda cost profile for" in capsys.readouterr().err


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_trees_chosen_by_auto_equal_plain_in_fp32_on_cuda(qwen2_dir, cuda_graphs):
    """`auto` on prices where width is free asks the suffix drafters for trees, forward by forward;
    verified on CUDA (eager and under recorded graphs) they keep plain's tokens, as on the CPU."""
    from specroll.drafting.registry import DrafterContext, make_drafter
    from specroll.policies.auto import AutoPolicy
    from specroll.policies.cost_model import CostModel

    free_width = CostModel(c_base=0.05, c_tok=1e-3, prices=[(1, 1, 1.0), (1, 9, 0.05 / 0.059)], device="cuda")
    plain = rollout(qwen2_dir, workload(), **GPU, cuda_graphs=cuda_graphs, max_draft=8)
    drafter = make_drafter("suffix", DrafterContext(vocab_size=97))
    spec = rollout(
        qwen2_dir, workload(), drafter, AutoPolicy(free_width), **GPU, cuda_graphs=cuda_graphs, max_draft=8
    )
    assert_lossless(plain, spec, rollout.last_engine, logprob_tolerance=1e-4)
    trees = [f for f in rollout.last_engine.telemetry.decode_forwards if f.tree and f.num_drafted]
    assert trees and sum(f.num_accepted for f in trees) > 0
