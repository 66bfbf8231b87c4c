"""A head's coupling report (`head.evaluation`) on a small random head and target: at temperature 0
every coupling is argmax agreement, counted here by the slow way; at temperature 1 the rates are the
coupling functions' on the tempered softmaxes."""

from __future__ import annotations

import math

import pytest
import torch

from specroll.drafting.head_model import DraftHead, HeadConfig
from specroll.head.evaluation import RATES, coupling_report
from specroll.head.features import FeatureSequence, top_targets

H, V = 16, 4  # a vocabulary this small makes chance agreements of argmaxes common


@pytest.fixture(scope="module")
def setting() -> tuple[DraftHead, torch.Tensor, torch.Tensor, list[FeatureSequence]]:
    torch.manual_seed(0)
    head = DraftHead(HeadConfig(H, V, V, intermediate_size=32, num_blocks=1), torch.arange(V))
    embedding, lm_head_weight = torch.randn(V, H), torch.randn(V, H)
    sequences = []
    for n in (9, 6, 12):
        hidden = torch.randn(n, H)
        ids, probs = top_targets(hidden @ lm_head_weight.T, 1.0, 3)
        sequences.append(FeatureSequence(torch.randint(V, (n,)), hidden, ids, probs))
    return head, embedding, lm_head_weight, sequences


def _argmax_agreement(head, embedding, lm_head_weight, sequences, depth: int) -> float:
    """The fraction of positions where the head's most likely token, `depth` steps from a real hidden
    state and fed the real tokens, is the target's, one position at a time."""
    agree = total = 0
    with torch.no_grad():
        for seq in sequences:
            for j in range(seq.num_positions - depth):
                feature = head.first_feature(seq.hidden[j])
                for d in range(1, depth + 1):
                    feature = head.step(feature, embedding[seq.tokens[j + d]])
                target = int((seq.hidden[j + depth] @ lm_head_weight.T).argmax())
                agree += int(head.logits(feature).argmax()) == target
                total += 1
    return agree / total


def test_at_temperature_zero_every_coupling_is_argmax_agreement(setting):
    """Greedy sampling: p and q are one-hots (`tempered_softmax`), so every coupling agrees exactly
    where the two argmaxes do; no rate is NaN (the softmax of logits / 0 was)."""
    reports = coupling_report(*setting, depth=2, temperature=0.0)
    for report in reports:
        assert set(report.rates) == set(RATES)
        expected = _argmax_agreement(*setting, report.depth)
        assert 0 < expected < 1  # some positions agree and some do not: the check can fail both ways
        for name, rate in report.rates.items():
            assert not math.isnan(rate), name
            assert rate == pytest.approx(expected, abs=1e-6), name


def test_at_temperature_one_the_rates_lie_below_the_maximal_coupling(setting):
    (first, _) = coupling_report(*setting, depth=2, temperature=1.0)
    assert first.num_positions == 8 + 5 + 11
    maximal = first.rates["maximal"]
    assert 0 < maximal < 1
    assert all(0 <= rate <= maximal + 1e-6 for rate in first.rates.values())
