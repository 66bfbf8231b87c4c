"""auto weighs trees beside chains and no draft, forward by forward, on measured prices.

A small world stands in for the engine: forwards cost what a CPU's cost (at batch 1 a forward reads
the weights once and width is nearly free; at batch 64 every token costs its arithmetic), chains are
accepted token by token with probability ALPHA, and a tree of n nodes gets TREE_ACCEPTED[n] draft
tokens accepted on average. The cost model is fitted to that world's forwards on a profile grid.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from specroll.policies.auto import AutoPolicy
from specroll.policies.base import BatchView, ForwardStats, RequestView
from specroll.policies.cost_model import LatencySample, fit

ALPHA = 0.5
TREE_ACCEPTED = {4: 1.0, 8: 1.3, 16: 1.6}


def world_seconds(batch_size: int, width: int) -> float:
    """A forward's seconds: weights read once (0.1 s), and past 16 tokens, each token's arithmetic."""
    return 0.1 + 1e-3 * max(0, batch_size * width - 16)


def profiled():
    grid = [(b, w, c) for b in (1, 2, 4, 16, 64) for w in (1, 2, 3, 5, 9, 17) for c in (0, 256)]
    return fit([LatencySample(b, w, c, world_seconds(b, w)) for b, w, c in grid], source="world")


class World:
    def __init__(self, batch_size: int, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.counts = [[0, 0] for _ in range(batch_size)]  # per request: drafted, accepted
        self.shapes: list[str] = []
        self.chain_trials = 0  # Bernoulli trials of chain drafts: accepted, and a first rejection

    def view(self, trees: bool = True) -> BatchView:
        requests = [RequestView(i, 0, 50, 400, d, a, 1, 300) for i, (d, a) in enumerate(self.counts)]
        return BatchView(requests, max_draft=16, trees=trees)

    def step(self, policy: AutoPolicy, trees: bool = True) -> None:
        decision = policy.decide(self.view(trees))
        lengths = decision.draft_lengths
        accepted = [self._accepted(k, decision.tree) for k in lengths]
        for counts, k, a in zip(self.counts, lengths, accepted):
            counts[0] += k
            counts[1] += a
            self.chain_trials += 0 if decision.tree or k == 0 else a + (a < k)
        width = max(lengths) + 1
        policy.observe(
            ForwardStats(
                batch_size=len(lengths),
                num_drafted=sum(lengths),
                num_accepted=sum(accepted),
                num_emitted=sum(accepted) + len(lengths),
                forward_seconds=world_seconds(len(lengths), width),
                draft_seconds=0.0,
                drafted=tuple(lengths),
                accepted=tuple(accepted),
                tree=decision.tree,
            )
        )
        self.shapes.append(decision.shape)

    def _accepted(self, k: int, tree: bool) -> int:
        if k == 0:
            return 0
        if tree:  # the mean of TREE_ACCEPTED[k], in whole tokens
            mean = TREE_ACCEPTED[k]
            return int(mean) + (self.rng.random() < mean - int(mean))
        run = 0
        while run < k and self.rng.random() < ALPHA:
            run += 1
        return run

    def share(self, prefix: str, last: int) -> float:
        return sum(s.startswith(prefix) for s in self.shapes[-last:]) / last


def run(batch_size: int, steps: int, trees: bool = True) -> tuple[World, AutoPolicy]:
    world, policy = World(batch_size), AutoPolicy(profiled(), warmup_trials=16)
    for _ in range(steps):
        world.step(policy, trees)
    return world, policy


def test_the_profile_prices_width_at_small_batch_as_measured():
    model = profiled()
    for b, w in ((1, 1), (1, 17), (64, 1), (64, 17), (4, 9)):
        assert model.forward_seconds(b, w, 0) == pytest.approx(world_seconds(b, w), rel=1e-9)
    assert model.forward_seconds(1, 17) / model.forward_seconds(1, 1) < 1.02  # width free at batch 1
    assert model.forward_seconds(64, 17) / model.forward_seconds(64, 1) > 5  # and not at batch 64
    bare = replace(model, prices=())  # the fit alone cannot hold both ends: it overprices width at batch 1
    assert bare.forward_seconds(1, 17) / bare.forward_seconds(1, 1) > 1.1


def test_trees_win_at_batch_one():
    # tree-16: 2.6 tokens in 0.101 s, tree-8 2.3 in 0.1 s, the best chain (4) 1.94 in 0.1 s
    world, _ = run(1, 400)
    assert world.share("tree-16", 200) > 0.8, world.shapes[-200:]
    assert 0 < world.share("chain", 200) < 0.1  # probe steps keep the chains measured


def test_no_trees_at_full_batch_where_width_costs_its_arithmetic():
    world, _ = run(64, 300)
    assert world.share("tree", 200) < 0.1, world.shapes[-200:]
    assert world.share("none", 200) + world.share("chain-1", 200) > 0.8


def test_a_batch_that_shrinks_moves_from_chains_or_nothing_to_trees():
    world, policy = World(64), AutoPolicy(profiled(), warmup_trials=16)
    for _ in range(200):
        world.step(policy)
    full = world.share("tree", 100)
    world.counts = world.counts[:1]  # the tail: one request left
    for _ in range(200):
        world.step(policy)
    assert full < 0.1 and world.share("tree", 100) > 0.8, world.shapes


def test_trees_leave_the_chains_acceptance_alone():
    world, policy = run(1, 400)
    # the chains' trials are the chain forwards' alone: a tree's deep acceptance is not a chain's
    assert policy.tracker.pooled_trials == world.chain_trials > 0
    assert policy.trees.expected_accepted(16, ALPHA) == pytest.approx(TREE_ACCEPTED[16], abs=0.2)


def test_no_tree_is_asked_for_where_the_drafter_drafts_none():
    world, _ = run(1, 200, trees=False)
    assert world.share("tree", 200) == 0.0
    assert world.share("chain", 200) > 0.8


def test_tree_budgets_must_be_positive():
    with pytest.raises(ValueError, match="tree budgets"):
        AutoPolicy(profiled(), tree_budgets=(0, 4))
