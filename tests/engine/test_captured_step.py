"""A verification step recorded whole (forward, LM head, verification), run eagerly on this CPU: the
eager path's results, its recorded part free of host synchronisations, and the cases it leaves to
the eager path."""

from __future__ import annotations

import pytest
import torch

from specroll.drafting.protocol import Draft
from specroll.engine.captured_step import CapturedStep
from specroll.engine.verify_inputs import pack_inputs, row_parents
from specroll.engine.request import Request, SamplingParams
from specroll.engine.verifier import verify_batch
from specroll.model.runner import ModelRunner, SequenceInput

SETTINGS = [(1.0, 0, 1.0), (0.7, 3, 0.9), (0.0, 0, 1.0), (1.0, 0, 0.5)]  # temperature, top-k, top-p
PROMPTS = [[3, 4, 5, 6], [7, 8], [9, 10, 11], [12]]
SLOTS = [3, 0, 5, 1]  # out of order, with holes


def _requests() -> list[Request]:
    requests = []
    for i, ((t, k, p), prompt) in enumerate(zip(SETTINGS, PROMPTS)):
        request = Request(10 + i, i, 0, tuple(prompt), SamplingParams(temperature=t, top_k=k, top_p=p))
        request.slot = SLOTS[i]
        requests.append(request)
    return requests


def _drafts(trees: bool) -> list[Draft]:
    tree = Draft(12, [4, 5, 6], parents=[-1, -1, 0]) if trees else Draft(12, [4])
    return [Draft(10, [1, 2, 3]), Draft(11, []), tree, Draft(13, [7, 8])]


def _sequences(requests, drafts):
    return [
        SequenceInput(
            r.slot,
            len(r.prompt_token_ids) - 1,
            [r.prompt_token_ids[-1], *d.token_ids],
            row_parents(d),
            1 + d.num_tokens,
        )
        for r, d in zip(requests, drafts)
    ]


def _runner(model_dir, batch_invariant: bool) -> ModelRunner:
    runner = ModelRunner.from_pretrained(model_dir, 8, 64, batch_invariant=batch_invariant)
    runner.use_static_forwards(max_width=5)
    runner.forward([SequenceInput(s, 0, p[:-1] or [p[0]]) for s, p in zip(SLOTS, PROMPTS) if len(p) > 1])
    return runner


@pytest.mark.parametrize("rule", ["inverse-cdf", "gumbel"])
@pytest.mark.parametrize("batch_invariant", [True, False])
def test_the_captured_step_gives_the_eager_steps_results(qwen2_dir, rule, batch_invariant, one_thread):
    requests, drafts = _requests(), _drafts(trees=not batch_invariant)
    eager, captured = _runner(qwen2_dir, batch_invariant), _runner(qwen2_dir, batch_invariant)
    sequences = _sequences(requests, drafts)
    out = eager.forward(sequences)
    expected = verify_batch(requests, drafts, out.logits, 7, "exact", rule)
    step = CapturedStep(captured, 7, "exact", rule)
    assert step.fits(sequences, drafts)
    result = step.verify(requests, drafts, sequences)
    hidden = result.hidden
    assert result.token_ids == expected.token_ids and result.num_accepted == expected.num_accepted
    assert result.accepted_nodes == expected.accepted_nodes
    if batch_invariant:  # the same bits
        assert result.logprobs == expected.logprobs and torch.equal(hidden, out.hidden)
    else:
        torch.testing.assert_close(hidden, out.hidden, atol=1e-4, rtol=0)


def test_the_recorded_step_never_synchronises_with_the_host(qwen2_dir, one_thread):
    torch._dynamo.reset()
    requests, drafts = _requests(), _drafts(trees=False)
    runner = _runner(qwen2_dir, batch_invariant=True)
    step = CapturedStep(runner, 7, "exact", "gumbel")
    sequences = _sequences(requests, drafts)
    shape = runner.static.shape_of(sequences)
    with torch.inference_mode():
        forward = runner.static.load(sequences, shape)
        slots = [s.slot for s in sequences]
        ints, floats, flags = step.pack(requests, drafts, slots, shape)
        ints, floats = torch.from_numpy(ints), torch.from_numpy(floats)
        expected = step._step(forward, ints, floats, shape, *flags)
        traced = torch.compile(step._step, fullgraph=True, backend="eager")(
            forward, ints, floats, shape, *flags
        )
    assert torch.equal(traced[0], expected[0]) and torch.equal(traced[1], expected[1])


def test_the_verification_inputs_sit_in_each_requests_slot_row():
    requests, drafts = _requests(), _drafts(trees=True)
    slots = [s.slot for s in _sequences(requests, drafts)]
    ints, floats, flags = pack_inputs(requests, drafts, slots, 8, 4)
    assert ints.shape == (8, 3 + 4 + 3) and floats.shape == (8, 2)
    assert ints[3].tolist() == [10, 3, 0, 0, 1, 2, 3, 1, 2, 3]  # id, drafts, top-k, positions, drafts
    assert ints[5].tolist() == [12, 3, 0, 0, 1, 1, 2, 4, 5, 6]  # a tree's rows: depths 0, 1, 1, 2
    assert ints[0, :3].tolist() == [11, 0, 3] and floats[0].tolist() == pytest.approx([0.7, 0.9])
    assert ints[2].tolist() == [0] * 10 and floats[2].tolist() == [1.0, 1.0]  # no request: padding
    assert flags == (True, True, False)  # some row truncates, some row is greedy, not every one at T = 1


def test_drafts_with_probabilities_and_wide_forwards_stay_eager(qwen2_dir):
    runner = _runner(qwen2_dir, batch_invariant=False)
    step = CapturedStep(runner, 7, "rejection", "inverse-cdf")
    requests, drafts = _requests(), _drafts(trees=False)
    sequences = _sequences(requests, drafts)
    assert step.fits(sequences, drafts)
    with_probs = [Draft(10, [1, 2, 3], probs=torch.full((3, 97), 1 / 97)), *drafts[1:]]
    assert not step.fits(sequences, with_probs)
    assert not step.fits([SequenceInput(0, 3, [1] * 6)], [Draft(10, [1] * 5)])
    with pytest.raises(ValueError, match="use_static_forwards"):
        CapturedStep(ModelRunner.from_pretrained(qwen2_dir, 2, 16), 7, "exact", "inverse-cdf")


def test_a_rollout_replaying_recorded_steps_gives_plains_tokens_and_counts_its_graphs(monkeypatch):
    """Every forward and verification step under graph semantics (`graph_stand_in`): the records of a
    speculative rollout equal plain's, and the summary counts the graphs its steps recorded."""
    from dataclasses import replace

    from graph_stand_in import ReplayedOnCpu

    from specroll.rollout import RolloutConfig, run_rollout

    config = RolloutConfig(num_prompts=4, n=4, max_tokens=24, policy="fixed-3", threads=1)  # bundled policy
    plain = run_rollout(replace(config, speculate="off"))
    made = []
    monkeypatch.setattr(
        "specroll.model.static_forward.Replayer", lambda device: made.append(ReplayedOnCpu()) or made[-1]
    )
    graphed = run_rollout(replace(config, speculate="prompt-lookup").with_engine(cuda_graphs=True))
    assert sum(len(r.token_ids) for r in plain.records) > 0
    assert [(r.token_ids, r.logprobs) for r in graphed.records] == [
        (r.token_ids, r.logprobs) for r in plain.records
    ]
    assert graphed.summary.mean_acceptance_length > 1  # drafts were verified and accepted
    assert graphed.summary.graphs_recorded == made[0].num_graphs > 0 and made[0].num_replays > 0
    assert graphed.summary.graph_recording_seconds > 0
