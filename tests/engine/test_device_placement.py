"""Every tensor of an engine step lives on the model's device, and the device part of verification
never synchronises with the host: proven on this CPU, so that a GPU run does not discover it.

Two foreign devices stand in for a GPU. `meta` tensors carry shapes only, and an op mixing one with
a CPU tensor raises the device-mismatch error a GPU would: verification and the model's forward are
run on meta inputs, so a tensor made on the CPU anywhere in them fails the test. And a real CPU
rollout runs with meta as torch's default device, so a tensor made without naming its device (it
lands on meta) fails when it meets the model's CPU tensors. Host synchronisations (`.item()`,
`bool(tensor)`, `.tolist()`) are found by tracing the device part with `torch.compile(fullgraph=True)`,
which refuses to break the graph at one.
"""

from __future__ import annotations

import pytest
import torch

from specroll.drafting.draft_model import DraftModelDrafter
from specroll.drafting.oracle import OracleDrafter
from specroll.drafting.protocol import Draft
from specroll.engine.engine import add_requests
from specroll.engine.request import Request, SamplingParams
from specroll.engine.verifier import verify_on_device
from specroll.engine.verify_inputs import verify_inputs
from specroll.model.loader import read_config
from specroll.model.runner import ModelRunner, SequenceInput
from specroll.model.transformer import CausalLM
from specroll.policies.fixed import FixedDraftLength

from helpers import assert_lossless, make_engine, rollout, workload

META = torch.device("meta")
V = 50
SETTINGS = [(1.0, 0, 1.0), (0.7, 3, 0.9), (0.0, 0, 1.0), (1.0, 0, 0.5)]  # temperature, top-k, top-p


def _requests_and_drafts(with_probs: bool):
    requests = [
        Request(i, i % 2, i, (1, 2, 3), SamplingParams(temperature=t, top_k=k, top_p=p))
        for i, (t, k, p) in enumerate(SETTINGS)
    ]
    chains = [[5, 6, 7], [8], [], [9, 10]]
    probs = [torch.softmax(torch.randn(len(c), V), -1) if with_probs and c else None for c in chains]
    return requests, [Draft(i, c, probs=q) for i, (c, q) in enumerate(zip(chains, probs))]


MODES = [("exact", "inverse-cdf"), ("exact", "gumbel"), ("rejection", "inverse-cdf")]


@pytest.mark.parametrize("mode, rule", MODES)
def test_verification_makes_every_tensor_on_the_logits_device(mode, rule):
    requests, drafts = _requests_and_drafts(with_probs=mode == "rejection")
    logits = torch.randn(len(requests), 4, V, device=META)
    inputs = verify_inputs(requests, drafts, 4, V, META)
    packed = verify_on_device(logits, inputs, seed=3, mode=mode, rule=rule)
    assert packed.device == META and packed.shape == (4, 9)
    with pytest.raises((RuntimeError, NotImplementedError), match="device"):  # the check can fail
        verify_on_device(logits, verify_inputs(requests, drafts, 4, V, torch.device("cpu")), 3, mode, rule)


@pytest.mark.parametrize("mode, rule", MODES)
def test_the_device_part_of_verification_never_synchronises_with_the_host(mode, rule):
    torch._dynamo.reset()
    requests, drafts = _requests_and_drafts(with_probs=mode == "rejection")
    logits = torch.randn(len(requests), 4, V)
    inputs = verify_inputs(requests, drafts, 4, V, torch.device("cpu"))
    captured = torch.compile(verify_on_device, fullgraph=True, backend="eager")
    expected = verify_on_device(logits, inputs, 3, mode, rule)
    assert torch.equal(captured(logits, inputs, 3, mode, rule), expected)


def test_a_host_synchronisation_fails_the_capture():
    torch._dynamo.reset()
    synchronising = torch.compile(
        lambda x: x * 2 if bool((x > 0).any()) else x, fullgraph=True, backend="eager"
    )
    with pytest.raises(Exception, match="(?i)data.dependent|graph break|unsupported"):
        synchronising(torch.ones(3))


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_the_models_forward_runs_on_another_device(qwen2_dir, batch_invariant):
    with torch.device(META):
        model = CausalLM(read_config(qwen2_dir))
    runner = ModelRunner(model, num_slots=4, capacity=64, batch_invariant=batch_invariant)
    prefill = runner.forward([SequenceInput(0, 0, [3, 4, 5]), SequenceInput(2, 0, [6, 7])])
    assert prefill.logits.device == META and prefill.logits.shape == (2, 1, 97)
    tree = SequenceInput(2, 2, [8, 9, 10, 11], parents=[-1, 0, 0, 2], num_logits=4)
    out = runner.forward([SequenceInput(0, 3, [1, 2], num_logits=2), tree])
    assert out.logits.device == META and out.logits.shape == (2, 4, 97)
    runner.cache.move_slots([0], [1], 5)
    runner.cache.move(2, [4, 5], [2, 3])


def _rollout_with_default_device(device, model_dir, requests, drafter, **config):
    """Built as usual; run with `device` as torch's default device."""
    engine = make_engine(model_dir, drafter, FixedDraftLength(3), **config)
    assert not add_requests(engine, requests)
    with torch.device(device):
        engine.run()
    rollout.last_engine = engine
    return requests


@pytest.mark.parametrize("drafter, cuda_graphs", [("draft-model", False), ("tree", False), ("tree", True)])
def test_an_engine_step_names_the_device_of_every_tensor_it_makes(qwen2_dir, tmp_path, drafter, cuda_graphs):
    """A rollout with meta as the default device gives the tokens of an ordinary one: no tensor of its
    forwards (dynamic, or static as CUDA graphs replay them), drafting, sampling, verification or
    noise was made without naming its device."""
    from tiny_checkpoints import save_tiny_checkpoint

    params = dict(temperature=0.8, top_k=20, top_p=0.9)
    plain = rollout(qwen2_dir, workload(**params), batch_invariant=drafter != "tree")
    if drafter == "tree":
        make = lambda: TreeOracle({r.request_id: r.output_token_ids for r in plain}, vocab_size=97)  # noqa: E731
        config = dict(batch_invariant=False, cuda_graphs=cuda_graphs)
    else:
        save_tiny_checkpoint("qwen2", tmp_path, logit_scale=30.0)
        make = lambda: DraftModelDrafter.from_pretrained(tmp_path, 16, 128, draw="sample")  # noqa: E731
        config = dict(verify="rejection")
    spec = _rollout_with_default_device(META, qwen2_dir, workload(**params), make(), **config)
    if drafter == "tree":
        assert_lossless(plain, spec, rollout.last_engine, logprob_tolerance=1e-5)
    else:  # rejection mode draws otherwise than exact mode: compare with the same run on the CPU default
        again = _rollout_with_default_device("cpu", qwen2_dir, workload(**params), make(), **config)
        assert [r.output_token_ids for r in spec] == [r.output_token_ids for r in again]
        assert rollout.last_engine.telemetry.mean_acceptance_length > 1.0


class TreeOracle(OracleDrafter):
    """Tree drafts: a wrong root beside the oracle's chain, so the off-chain branch is accepted."""

    def _propose(self, query):
        chain = super()._propose(query).token_ids
        if len(chain) < 2:
            return Draft(query.request_id, chain)
        tokens = [(chain[0] + 1) % self.vocab_size, *chain[: query.budget - 1]]
        return Draft(query.request_id, tokens, parents=[-1, -1, *range(1, len(tokens) - 1)])
