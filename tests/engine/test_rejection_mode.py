"""Rejection mode through the whole engine: sequences follow the target's distribution.

Many requests of one prompt (distinct request ids draw independent noise) give an empirical
distribution of their first three tokens; with drafts verified by speculative sampling it must match
plain sampling as closely as two plain runs with different seeds match each other.
"""

from __future__ import annotations

from collections import Counter

import torch

from specroll.drafting.protocol import BaseDrafter, Draft
from specroll.engine.request import Request, SamplingParams
from specroll.policies.fixed import FixedDraftLength

from helpers import rollout

NUM = 1000
PROMPT = (5, 17, 33, 5, 17)


class FixedTokenDrafter(BaseDrafter):
    """Always proposes the same tokens, deterministically (q = one-hot)."""

    def __init__(self, tokens):
        self.tokens = tokens

    def propose(self, queries):
        return [Draft(q.request_id, self.tokens[: q.budget]) for q in queries]


class SamplingDrafter(BaseDrafter):
    """Samples each draft token from a fixed random distribution q and reports q."""

    def __init__(self, vocab_size, seed=0):
        self.g = torch.Generator().manual_seed(seed)
        self.q = torch.softmax(torch.randn(vocab_size, generator=self.g) * 3, -1)

    def propose(self, queries):
        drafts = []
        for q in queries:
            tokens = torch.multinomial(self.q, q.budget, replacement=True, generator=self.g)
            drafts.append(Draft(q.request_id, tokens.tolist(), probs=self.q.expand(q.budget, -1)))
        return drafts


def requests():
    return [Request(i, 0, i, PROMPT, SamplingParams(max_tokens=3)) for i in range(NUM)]


def histogram(model_dir, drafter=None, policy=None, **config):
    done = rollout(model_dir, requests(), drafter, policy, max_batch_size=256, **config)
    return Counter(tuple(r.output_token_ids) for r in done)


def total_variation(a: Counter, b: Counter) -> float:
    return 0.5 * sum(abs(a[k] - b[k]) for k in set(a) | set(b)) / NUM


def test_rejection_mode_follows_target_distribution(qwen2_dir):
    plain = histogram(qwen2_dir, seed=1)
    noise_floor = total_variation(plain, histogram(qwen2_dir, seed=2))
    likely = plain.most_common(1)[0][0]
    for drafter in (FixedTokenDrafter(list(likely[1:])), FixedTokenDrafter([40, 41]), SamplingDrafter(97)):
        spec = histogram(qwen2_dir, drafter, FixedDraftLength(2), verify="rejection", seed=3)
        assert total_variation(plain, spec) < 1.5 * noise_floor + 0.02, type(drafter).__name__
    # the threshold has power: accepting the fixed drafts blindly would be caught
    blind = Counter()
    for tokens, count in plain.items():
        blind[(tokens[0], 40, 41)[: len(tokens)]] += count
    assert total_variation(plain, blind) > 1.5 * noise_floor + 0.02


def test_rejection_mode_with_sampling_draft_model(qwen2_dir, tmp_path):
    from specroll.drafting.draft_model import DraftModelDrafter
    from tiny_checkpoints import save_tiny_checkpoint

    save_tiny_checkpoint("llama", tmp_path)  # a different model: q differs from p
    plain = histogram(qwen2_dir, seed=1)
    noise_floor = total_variation(plain, histogram(qwen2_dir, seed=2))
    drafter = DraftModelDrafter.from_pretrained(tmp_path, 256, 32, draw="sample", seed=5)
    spec = histogram(qwen2_dir, drafter, FixedDraftLength(2), verify="rejection", seed=3)
    assert total_variation(plain, spec) < 1.5 * noise_floor + 0.02
