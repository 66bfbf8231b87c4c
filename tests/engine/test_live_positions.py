"""Exact verification samples only the logit rows a step reads: a row padded to the widest draft
costs no softmax, running sum or log-softmax over the vocabulary, and every row read gets the bits
the full grid gives it."""

from __future__ import annotations

import pytest
import torch

import specroll.engine.verifier as verifier
from specroll.drafting.protocol import Draft
from specroll.engine.request import Request, SamplingParams
from specroll.engine.verifier import live_positions, verify_batch, verify_on_device
from specroll.engine.verify_inputs import verify_inputs

V = 300
SETTINGS = [(1.0, 0, 1.0), (0.7, 3, 0.9), (0.0, 0, 1.0), (1.0, 0, 0.5), (1.3, 0, 1.0)]  # T, top-k, top-p
CHAINS = [[5, 6, 7], [8], [], [9, 10], []]


def _requests_and_drafts():
    requests = [
        Request(i, i % 2, i, (1, 2, 3), SamplingParams(temperature=t, top_k=k, top_p=p))
        for i, (t, k, p) in enumerate(SETTINGS)
    ]
    return requests, [Draft(i, c) for i, c in enumerate(CHAINS)]


def test_live_positions_are_each_rows_fed_token_and_drafts():
    _, drafts = _requests_and_drafts()
    assert live_positions(drafts, 4, torch.device("cpu")).tolist() == [0, 1, 2, 3, 4, 5, 8, 12, 13, 14, 16]
    assert live_positions([Draft(0, [1]), Draft(1, [2])], 2, torch.device("cpu")) is None  # all read


@pytest.mark.parametrize("rule", ["inverse-cdf", "gumbel"])
def test_the_rows_read_get_the_full_grids_bits(rule):
    requests, drafts = _requests_and_drafts()
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(len(requests), 4, V, generator=g) * 3
    # the drafts follow the target's likeliest tokens often enough that some are accepted
    logits[0, 0, 5] = logits[0, 1, 6] = logits[3, 0, 9] = 40.0
    inputs = verify_inputs(requests, drafts, 4, V, torch.device("cpu"))
    live = live_positions(drafts, 4, torch.device("cpu"))
    full = verify_on_device(logits, inputs, 7, "exact", rule)
    compact = verify_on_device(logits, inputs, 7, "exact", rule, live)
    Tl = 4
    tokens, logprobs = slice(0, Tl), slice(Tl, 2 * Tl)
    for b, d in enumerate(drafts):
        read = slice(0, d.num_tokens + 1)
        assert torch.equal(compact[b, tokens][read], full[b, tokens][read])
        assert torch.equal(compact[b, logprobs][read], full[b, logprobs][read])
    assert torch.equal(compact[:, -1], full[:, -1])  # accepted counts
    assert full[:, -1].sum() > 0


def test_verify_batch_samples_only_the_rows_it_reads(monkeypatch):
    requests, drafts = _requests_and_drafts()
    seen = []
    tempered_rows = verifier.tempered_rows

    def counting(logits, rows):
        seen.append(logits.shape[0])
        return tempered_rows(logits, rows)

    monkeypatch.setattr(verifier, "tempered_rows", counting)
    result = verify_batch(requests, drafts, torch.randn(len(requests), 4, V), 7, "exact")
    assert seen == [sum(len(c) + 1 for c in CHAINS)]  # 11 of the grid's 20
    assert [len(t) for t in result.token_ids] == [n + 1 for n in result.num_accepted]
