"""Sampling helpers and keyed noise: literal values, determinism, and the target distribution."""

from __future__ import annotations

import torch

from specroll.noise import STREAM_ACCEPT, STREAM_SAMPLE, uniforms
from specroll.sampling import (
    SamplingRows,
    policy_logprobs,
    sample_from,
    sampling_logits,
    sampling_probs,
    tempered_softmax,
)


def params(n, temperature=1.0, top_k=0, top_p=1.0):
    return SamplingRows.build([float(temperature)] * n, [top_k] * n, [float(top_p)] * n)


def test_uniforms_are_keyed_and_independent_of_batch():
    ids, pos = torch.tensor([3, 4, 3]), torch.tensor([10, 10, 11])
    batch = uniforms(0, ids, pos, STREAM_SAMPLE)
    alone = uniforms(0, torch.tensor([4]), torch.tensor([10]), STREAM_SAMPLE)
    assert batch[1] == alone[0]
    assert len(set(batch.tolist())) == 3
    assert not torch.equal(batch, uniforms(1, ids, pos, STREAM_SAMPLE))
    assert not torch.equal(batch, uniforms(0, ids, pos, STREAM_ACCEPT))
    assert ((batch > 0) & (batch < 1)).all()


def _splitmix_reference(*keys: int) -> float:
    """SplitMix64's finaliser over Python integers, mod 2**64: the slow reference for `uniforms`."""
    mask = (1 << 64) - 1
    state = 0
    for key in keys:
        x = (state + 0x9E3779B97F4A7C15 + key) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        state = x ^ (x >> 31)
    return ((state >> 11) + 0.5) * 2.0**-53


def test_uniforms_equal_the_integer_reference():
    ids, pos = torch.tensor([[0], [3], [123_456_789]]), torch.tensor([[0, 1, 511]])
    for seed in (0, 1, -5, 2**40 + 3):
        u = uniforms(seed, ids, pos, STREAM_ACCEPT)
        assert u.shape == (3, 3)
        for i in range(3):
            for j in range(3):
                expected = _splitmix_reference(seed, int(ids[i, 0]), int(pos[0, j]), STREAM_ACCEPT)
                assert u[i, j].item() == expected


def test_uniforms_look_uniform():
    u = uniforms(0, torch.arange(200_000), torch.zeros(200_000, dtype=torch.long), STREAM_SAMPLE)
    assert abs(u.mean().item() - 0.5) < 0.005
    hist = torch.histc(u.float(), bins=10, min=0, max=1) / len(u)
    assert (hist - 0.1).abs().max() < 0.005


def test_inverse_cdf_literal():
    probs = torch.tensor([[0.2, 0.5, 0.3]] * 4)
    u = torch.tensor([0.1, 0.2001, 0.69, 0.71], dtype=torch.float64)
    assert sample_from(probs, u).tolist() == [0, 1, 1, 2]


def test_top_k_and_top_p_truncate():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top2 = sampling_probs(sampling_logits(logits, params(1, top_k=2)), params(1))
    assert torch.allclose(top2, torch.tensor([[0.625, 0.375, 0, 0]]))
    nucleus = sampling_probs(sampling_logits(logits, params(1, top_p=0.8)), params(1))
    assert torch.allclose(nucleus, torch.tensor([[0.625, 0.375, 0, 0]]))  # 0.5 + 0.3 reaches 0.8
    tiny = sampling_probs(sampling_logits(logits, params(1, top_p=0.01)), params(1))
    assert torch.allclose(tiny, torch.tensor([[1.0, 0, 0, 0]]))


def test_greedy_is_argmax_and_reports_plain_logprob():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    temperature = torch.zeros(1)
    rows = params(1, temperature=0.0)
    scaled = sampling_logits(logits, rows)
    probs = sampling_probs(scaled, rows)
    token = sample_from(probs, torch.tensor([0.99], dtype=torch.float64))
    assert token.item() == 1
    assert torch.allclose(policy_logprobs(logits, token, temperature), torch.log_softmax(logits, -1)[:, 1])


def test_temperature_sampling_matches_softmax():
    logits = torch.tensor([1.0, 0.0, -1.0, 0.5])
    n = 100_000
    scaled = sampling_logits(logits.expand(n, -1), params(n, temperature=0.7))
    tokens = sample_from(
        sampling_probs(scaled, params(n, 0.7)),
        uniforms(5, torch.arange(n), torch.zeros(n, dtype=torch.long), STREAM_SAMPLE),
    )
    hist = torch.bincount(tokens, minlength=4).double() / n
    assert (hist - torch.softmax(logits / 0.7, -1).double()).abs().max() < 0.006


def test_policy_logprobs_are_the_untruncated_tempered_softmax_whatever_top_k_and_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    token = torch.tensor([1])
    expected = torch.log_softmax(logits / 0.5, -1)[:, 1]
    for top_k, top_p in ((0, 1.0), (2, 1.0), (0, 0.95), (2, 0.95)):
        scaled = sampling_logits(logits, params(1, 0.5, top_k, top_p))
        truncated = torch.log_softmax(scaled, -1)[:, 1]
        assert torch.equal(policy_logprobs(logits, token, torch.tensor([0.5])), expected)
        if (top_k, top_p) != (0, 1.0):  # the sampler's own distribution is renormalised: not the policy's
            assert truncated.item() > expected.item() + 1e-3
    assert policy_logprobs(logits, token, 0.5).item() == expected.item()  # a float temperature: same bits


def test_policy_logprobs_take_any_leading_shape():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    tokens = torch.tensor([[0, 4, 2], [1, 1, 3]])
    temperature = torch.tensor([[0.7, 0.7, 0.7], [0.0, 0.0, 0.0]])
    got = policy_logprobs(logits, tokens, temperature)
    assert got.shape == (2, 3)
    assert torch.equal(got[0], policy_logprobs(logits[0], tokens[0], 0.7))
    assert torch.equal(got[1], torch.log_softmax(logits[1], -1).gather(-1, tokens[1, :, None]).squeeze(-1))


def test_the_tempered_softmax_is_one_hot_at_temperature_zero_as_a_greedy_row_draws():
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.5, 0.0, -1.0]])
    one_hots = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert torch.equal(tempered_softmax(logits, 0.0), one_hots)
    greedy = params(2, temperature=0.0)
    assert torch.equal(sampling_probs(sampling_logits(logits, greedy), greedy), one_hots)
    assert torch.equal(tempered_softmax(logits, 2.0), torch.softmax(logits / 2.0, -1))
    per_row = tempered_softmax(logits, [0.0, 0.5])  # each row at its own temperature
    assert torch.equal(per_row[0], one_hots[0])
    assert torch.equal(per_row[1], torch.softmax(logits[1:] / 0.5, -1)[0])


def test_tempering_at_temperature_one_is_skipped_only_where_every_row_is_at_one():
    from specroll.sampling import tempered, tempered_rows

    logits = torch.randn(3, 50) * 4
    unit, mixed = params(3), SamplingRows.build([1.0, 0.7, 1.0], [0] * 3, [1.0] * 3)
    assert unit.is_unit_temperature and not mixed.is_unit_temperature
    assert unit.select(torch.tensor([0, 2])).is_unit_temperature  # a subset of unit rows is unit
    assert tempered_rows(logits, unit) is logits  # float32 logits: nothing computed
    assert torch.equal(tempered_rows(logits, unit), tempered(logits, unit.temperature))  # x / 1 == x
    assert torch.equal(tempered_rows(logits, mixed), tempered(logits, mixed.temperature))
    assert not torch.equal(tempered_rows(logits, mixed), logits)
    assert tempered_rows(logits.bfloat16(), unit).dtype == torch.float32
