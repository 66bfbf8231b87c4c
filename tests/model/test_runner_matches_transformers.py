"""The runner's logits equal `transformers`' own forward (fp32, 1e-4) for each architecture."""

from __future__ import annotations

import torch

from specroll.model.runner import ModelRunner, SequenceInput

ATOL = 1e-4


def hf_logits(model, token_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0]  # (T, V)


def test_prefill_decode_and_verify_after_rollback(tiny_checkpoint):
    arch, directory, hf_model = tiny_checkpoint
    runner = ModelRunner.from_pretrained(directory, num_slots=3, capacity=64)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, 97, (n,), generator=g).tolist() for n in (7, 12, 3)]
    slots = [2, 0, 1]  # out of order: exercises the gathered cache read

    # prefill: each prompt's last-token logits
    out = runner.forward([SequenceInput(s, 0, p) for s, p in zip(slots, prompts)])
    for b, p in enumerate(prompts):
        assert torch.allclose(out.logits[b, 0], hf_logits(hf_model, p)[-1], atol=ATOL), arch

    # one-token decode
    nxt = [5, 6, 7]
    out = runner.forward([SequenceInput(s, len(p), [t]) for s, p, t in zip(slots, prompts, nxt)])
    for b, (p, t) in enumerate(zip(prompts, nxt)):
        assert torch.allclose(out.logits[b, 0], hf_logits(hf_model, p + [t])[-1], atol=ATOL), arch

    # verify 4 drafts, then roll back 3 (only the first draft kept) and verify a different chain
    drafts = [[11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34]]
    runner.forward([SequenceInput(s, len(p) + 1, d, num_logits=4) for s, p, d in zip(slots, prompts, drafts)])
    new = [[40, 41, 42], [50, 51], [60, 61, 62]]
    out = runner.forward(
        [SequenceInput(s, len(p) + 2, d, num_logits=len(d)) for s, p, d in zip(slots, prompts, new)]
    )
    for b, (p, t, d, n) in enumerate(zip(prompts, nxt, drafts, new)):
        expected = hf_logits(hf_model, p + [t, d[0]] + n)[-len(n) :]
        assert torch.allclose(out.logits[b, : len(n)], expected, atol=ATOL), arch


def test_chunked_attention_equals_transformers(tiny_checkpoint):
    arch, directory, hf_model = tiny_checkpoint
    runner = ModelRunner.from_pretrained(directory, num_slots=4, capacity=64)
    runner.max_attention_chunks, runner.min_chunk_saving = 3, 0  # cut wherever a cut saves anything
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(2, 97, (n,), generator=g).tolist() for n in (40, 3, 25, 9)]
    runner.forward([SequenceInput(s, 0, p) for s, p in enumerate(prompts)])
    tokens = [[5, 6], [7], [8, 9], [10]]
    inputs = [SequenceInput(s, len(p), t, num_logits=len(t)) for s, (p, t) in enumerate(zip(prompts, tokens))]
    assert len(runner.prepare(inputs).spans) == 3
    out = runner.forward(inputs)
    for b, (p, t) in enumerate(zip(prompts, tokens)):
        assert torch.allclose(out.logits[b, : len(t)], hf_logits(hf_model, p + t)[-len(t) :], atol=ATOL), arch


def test_chunked_attention_with_a_tree_row(tiny_checkpoint):
    arch, directory, hf_model = tiny_checkpoint
    runner = ModelRunner.from_pretrained(directory, num_slots=3, capacity=64)
    runner.max_attention_chunks, runner.min_chunk_saving = 3, 0
    prompts = [list(range(3, 43)), [4, 5, 6], list(range(10, 30))]
    runner.forward([SequenceInput(s, 0, p) for s, p in enumerate(prompts)])
    # row 0: siblings 50 and 51 under the context; rows 1, 2: one token each
    inputs = [
        SequenceInput(0, 40, [50, 51], parents=[-1, -1], num_logits=2),
        SequenceInput(1, 3, [7]),
        SequenceInput(2, 20, [8]),
    ]
    assert len(runner.prepare(inputs).spans) > 1
    out = runner.forward(inputs)
    for node, token in enumerate([50, 51]):
        assert torch.allclose(
            out.logits[0, node], hf_logits(hf_model, prompts[0] + [token])[-1], atol=ATOL
        ), arch
    assert torch.allclose(out.logits[1, 0], hf_logits(hf_model, prompts[1] + [7])[-1], atol=ATOL), arch
    assert torch.allclose(out.logits[2, 0], hf_logits(hf_model, prompts[2] + [8])[-1], atol=ATOL), arch


def test_tree_verification_equals_each_branch(tiny_checkpoint):
    arch, directory, hf_model = tiny_checkpoint
    runner = ModelRunner.from_pretrained(directory, num_slots=1, capacity=64)
    prompt = [3, 4, 5, 6, 7]
    runner.forward([SequenceInput(0, 0, prompt)])
    # tree: 10 -> (11 -> 13), 10 -> 12
    tokens, parents = [10, 11, 12, 13], [-1, 0, 0, 1]
    out = runner.forward([SequenceInput(0, len(prompt), tokens, parents=parents, num_logits=4)])
    branches = {0: [10], 1: [10, 11], 2: [10, 12], 3: [10, 11, 13]}
    for node, path in branches.items():
        expected = hf_logits(hf_model, prompt + path)[-1]
        assert torch.allclose(out.logits[0, node], expected, atol=ATOL), (arch, node)


def test_hidden_states_match_last_hidden_state(tiny_checkpoint):
    arch, directory, hf_model = tiny_checkpoint
    runner = ModelRunner.from_pretrained(directory, num_slots=1, capacity=32)
    prompt = [3, 9, 27, 81 % 97, 50]
    out = runner.forward([SequenceInput(0, 0, prompt, num_logits=len(prompt))])
    with torch.no_grad():
        expected = hf_model.model(torch.tensor([prompt])).last_hidden_state[0]
    assert torch.allclose(out.hidden[0], expected, atol=ATOL), arch
